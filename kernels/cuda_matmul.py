"""Matrix products on the GPU: cuBLAS through CuPy when both are there, else a tiled kernel.

Operands are flat device arrays holding row-major matrices (one per batch entry); a
*spec* ``(rows, cols, transposed)`` says how an operand is stored: ``op(X)`` is the stored
``rows x cols`` matrix, or its transpose, read in place without a copy. Both paths compute
``out = alpha * op(A) @ op(B) + beta * c`` (the GEMM epilogue the fusion plan folds in).

The fallback kernel tiles ``out`` into ``BM x BN`` blocks; each thread accumulates a
``TM x TN`` register block from ``BK``-deep slices staged in shared memory (padded by one
column against bank conflicts).
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import numpy as np
from numba import cuda


class Tile(NamedTuple):
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> tuple[int, int]:
        return self.bn // self.tn, self.bm // self.tm


GPU_TILE = Tile(64, 64, 16, 4, 4)        # 256 threads, 16 outputs each
SIM_TILE = Tile(8, 8, 4, 2, 2)           # 16 threads: the simulator runs each one in Python


def op_strides(spec) -> tuple[int, int, int]:
    """(batch stride, row stride, column stride) of ``op(X)`` inside the flat array."""
    rows, cols, transposed = spec
    return (rows * cols, 1, cols) if transposed else (rows * cols, cols, 1)


@functools.lru_cache(maxsize=None)
def tiled_kernel(dtype_name: str, tile: Tile):
    """The tiled GEMM kernel for one dtype and tile shape (compiled once per process)."""
    dt = np.dtype(dtype_name).type
    BM, BN, BK, TM, TN = tile
    TX, TY = tile.threads
    NT = TX * TY
    A_LOADS = (BM * BK + NT - 1) // NT
    B_LOADS = (BK * BN + NT - 1) // NT
    A_TILE = (BK, BM + 1)      # shapes must be compile-time constants (closure values)
    B_TILE = (BK, BN + 1)
    ACC = (TM, TN)

    @cuda.jit
    def gemm_tiled(a, a_bs, a_rs, a_cs, b, b_bs, b_rs, b_cs, out, c, alpha, beta, m, n, kk):
        As = cuda.shared.array(A_TILE, dt)
        Bs = cuda.shared.array(B_TILE, dt)
        acc = cuda.local.array(ACC, dt)
        ar = cuda.local.array(TM, dt)
        br = cuda.local.array(TN, dt)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * TX + tx
        bz = cuda.blockIdx.z
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        zero = dt(0)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = zero
        for k0 in range(0, kk, BK):
            for l in range(A_LOADS):
                e = tid + l * NT
                if e < BM * BK:
                    r = e // BK
                    q = e % BK
                    gi = row0 + r
                    gk = k0 + q
                    v = zero
                    if gi < m and gk < kk:
                        v = a[bz * a_bs + gi * a_rs + gk * a_cs]
                    As[q, r] = v
            for l in range(B_LOADS):
                e = tid + l * NT
                if e < BK * BN:
                    q = e // BN
                    s = e % BN
                    gk = k0 + q
                    gj = col0 + s
                    v = zero
                    if gk < kk and gj < n:
                        v = b[bz * b_bs + gk * b_rs + gj * b_cs]
                    Bs[q, s] = v
            cuda.syncthreads()
            for p in range(BK):
                for i in range(TM):
                    ar[i] = As[p, ty + i * TY]
                for j in range(TN):
                    br[j] = Bs[p, tx + j * TX]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += ar[i] * br[j]
            cuda.syncthreads()
        for i in range(TM):
            gi = row0 + ty + i * TY
            if gi < m:
                for j in range(TN):
                    gj = col0 + tx + j * TX
                    if gj < n:
                        o = bz * m * n + gi * n + gj
                        val = alpha * acc[i, j]
                        if beta != 0:
                            val += beta * c[o]
                        out[o] = val
    return gemm_tiled


def gemm_fallback(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c, tile: Tile) -> None:
    kern = tiled_kernel(np.dtype(out.dtype).name, tile)
    grid = (-(-n // tile.bn), -(-m // tile.bm), batch)
    t = out.dtype.type
    kern[grid, tile.threads](a, *op_strides(a_spec), b, *op_strides(b_spec), out,
                             out if c is None else c, t(alpha), t(beta if c is not None else 0),
                             m, n, k)


# ---------------------------------------------------------------- cuBLAS (through CuPy)
class BlasCall(NamedTuple):
    """One column-major ``?gemm`` call computing a row-major product (C^T = op(B)^T op(A)^T):
    cuBLAS's A is jitgraph's B and the other way round."""
    transa: str
    transb: str
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int


def blas_call(a_spec, b_spec, m: int, n: int, k: int) -> BlasCall:
    """Map row-major ``op(A) @ op(B)`` onto cuBLAS's column-major GEMM without copies: a
    row-major matrix is its transpose in column-major order, so cuBLAS multiplies B's memory
    by A's, and a transposed operand is cuBLAS's 'T'."""
    ta = "T" if a_spec[2] else "N"
    tb = "T" if b_spec[2] else "N"
    return BlasCall(tb, ta, n, m, k, b_spec[1], a_spec[1], n)


def cublas_available() -> bool:
    """CuPy importable, a real GPU (not the simulator), and not switched off."""
    if os.environ.get("JITGRAPH_CUDA_MATMUL", "auto") == "fallback" or \
            os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    return _cupy() is not None


@functools.lru_cache(maxsize=None)
def _cupy():
    try:
        import cupy
        from cupy_backends.cuda.libs import cublas
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return None
    return cupy, cublas


def _ptr(x) -> int:
    return x.__cuda_array_interface__["data"][0]


def gemm_cublas(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c) -> None:
    """cuBLAS through CuPy's raw bindings; if those differ in this CuPy version, the same
    product through ``cupy.matmul`` on zero-copy views (one warning)."""
    global _RAW_OK
    if _RAW_OK:
        try:
            _gemm_raw(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c)
            return
        except (TypeError, AttributeError) as e:
            import warnings
            warnings.warn(f"jitgraph: CuPy's raw cuBLAS bindings failed ({e}); using cupy.matmul")
            _RAW_OK = False
    _gemm_cupy(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c)


_RAW_OK = True


def _gemm_cupy(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c) -> None:
    cupy, _ = _cupy()

    def op(x, spec):
        v = cupy.asarray(x).reshape(batch, spec[0], spec[1])
        return v.transpose(0, 2, 1) if spec[2] else v
    o = cupy.asarray(out).reshape(batch, m, n)
    prod = cupy.matmul(op(a, a_spec), op(b, b_spec))
    if c is not None and beta != 0:
        o[...] = alpha * prod + beta * cupy.asarray(c).reshape(batch, m, n)
    elif alpha != 1:
        o[...] = alpha * prod
    else:
        o[...] = prod


def _gemm_raw(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c) -> None:
    """One cuBLAS GEMM per batch entry on the device pointers (zero-copy; CuPy supplies the
    handle, on the default stream Numba also launches on)."""
    cupy, cublas = _cupy()
    dt = np.dtype(out.dtype)
    fn = {"float32": cublas.sgemm, "float64": cublas.dgemm}[dt.name]
    if c is not None and beta != 0 and _ptr(c) != _ptr(out):
        from .cuda_util import copy_into
        copy_into(out, c)
    call = blas_call(a_spec, b_spec, m, n, k)
    op = {"N": cublas.CUBLAS_OP_N, "T": cublas.CUBLAS_OP_T}
    al = np.array(alpha, dt)
    be = np.array(beta if c is not None else 0.0, dt)
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)   # alpha, beta: host scalars
    size = dt.itemsize
    pa, pb, pc = _ptr(a), _ptr(b), _ptr(out)
    sa, sb = a_spec[0] * a_spec[1] * size, b_spec[0] * b_spec[1] * size
    for bi in range(batch):
        fn(handle, op[call.transa], op[call.transb], call.m, call.n, call.k,
           al.ctypes.data, pb + bi * sb, call.lda, pa + bi * sa, call.ldb,
           be.ctypes.data, pc + bi * m * n * size, call.ldc)


def matmul(a, a_spec, b, b_spec, out, m, n, k, batch=1, alpha=1.0, beta=0.0, c=None) -> None:
    """``out = alpha * op(A) @ op(B) + beta * c`` on flat device arrays (c may be ``out``)."""
    if m * n == 0:
        return
    if np.dtype(out.dtype).kind == "f" and np.dtype(out.dtype).itemsize >= 4 and k > 0 and \
            cublas_available():
        gemm_cublas(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c)
        return
    tile = SIM_TILE if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else GPU_TILE
    gemm_fallback(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c, tile)
