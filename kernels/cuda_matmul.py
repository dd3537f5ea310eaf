"""Matrix products on the GPU: cuBLAS (nvmath-python's or CuPy's binding) where one loads, else a
tiled kernel.

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

from jitgraph import config

from . import cuda_scalar


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


_same = cuda.jit(device=True)(lambda x: x)
_WIDEN = {"float16": cuda_scalar.from_f16, "bfloat16": cuda_scalar.from_bf16}


@functools.lru_cache(maxsize=None)
def tiled_kernel(dtype_name: str, tile: Tile, operands: str | None = None):
    """The tiled GEMM kernel for one dtype and tile shape (compiled once per process);
    ``operands``: both operands' 16-bit float type (their bits, widened as they are staged:
    the products accumulate in ``dtype_name``)."""
    dt = np.dtype(dtype_name).type
    load = _WIDEN[operands] if operands else _same
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
        # one block per (batch entry, row tile, column tile), all on grid x: y and z are
        # limited to 65535 blocks, x to 2^31 - 1 (a batch of 70000 or 200000 rows fits)
        bid = np.int64(cuda.blockIdx.x)
        n_tiles = (n + BN - 1) // BN
        m_tiles = (m + BM - 1) // BM
        rest = bid // n_tiles
        bz = rest // m_tiles
        row0 = (rest % m_tiles) * BM
        col0 = (bid % n_tiles) * BN
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
                        v = load(a[bz * a_bs + gi * a_rs + gk * a_cs])
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
                        v = load(b[bz * b_bs + gk * b_rs + gj * b_cs])
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


def gemm_grid(m: int, n: int, batch: int, tile: Tile) -> int:
    """Blocks of the tiled kernel: the output tiles of every batch entry on grid x (row tile
    major, then column tile: neighbouring blocks share ``A``'s row tile)."""
    blocks = -(-n // tile.bn) * -(-m // tile.bm) * batch
    if blocks >= 2 ** 31:
        raise ValueError(f"matmul: {blocks} output tiles exceed the CUDA grid (2^31 - 1)")
    return blocks


def gemm_fallback(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c, tile: Tile,
                  driver=None, operands: str | None = None) -> None:
    kern = tiled_kernel(np.dtype(out.dtype).name, tile, operands)
    grid = gemm_grid(m, n, batch, tile)
    t = out.dtype.type
    args = (a, *op_strides(a_spec), b, *op_strides(b_spec), out, out if c is None else c,
            t(alpha), t(beta if c is not None else 0), m, n, k)
    if driver is None:
        from jitgraph.cuda_driver import driver as current
        driver = current()
    driver.launch(kern, grid, tile.threads, args)


# ---------------------------------------------------------------- cuBLAS
# cuBLAS's enums for GemmEx (cudaDataType_t, cublasComputeType_t, cublasGemmAlgo_t): plain
# integers, the same in every binding
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1


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


class Blas:
    """cuBLAS through a well-kept binding, on the driver's stream, with a handle of its own
    (setting its stream disturbs no other library) and a preallocated workspace, so a CUDA
    graph capture of a step can contain its GEMMs (cuBLAS allocates nothing while capturing
    once a workspace is set). Preferred binding: NVIDIA's ``nvmath-python``
    (``nvmath.bindings.cublas``); else CuPy's raw one (``cupy_backends.cuda.libs.cublas``).
    A batch is one strided-batched GEMM, not a loop."""

    WORKSPACE_BYTES = 32 << 20       # what cuBLAS asks for on Hopper

    def __init__(self, name: str, lib, driver):
        self.name, self.lib = name, lib
        if name == "nvmath":
            f = lambda n: getattr(lib, n)        # noqa: E731
            self.ops = {"N": lib.Operation.N, "T": lib.Operation.T}
            self._create, self._set_stream, self._set_ws, self._set_pm = (
                f("create"), f("set_stream"), f("set_workspace"), f("set_pointer_mode"))
            host = lib.PointerMode.HOST
            self._set_math = f("set_math_mode")
            self._math_modes = {"float32": lib.Math.DEFAULT_MATH,
                                "tf32": lib.Math.TF32_TENSOR_OP_MATH}
            self._gemm = {"float32": lib.sgemm_strided_batched,
                          "float64": lib.dgemm_strided_batched}
            self._gemm_ex = getattr(lib, "gemm_strided_batched_ex", None)
        else:
            self.ops = {"N": lib.CUBLAS_OP_N, "T": lib.CUBLAS_OP_T}
            self._create, self._set_stream, self._set_ws, self._set_pm = (
                lib.create, lib.setStream, getattr(lib, "setWorkspace", None), lib.setPointerMode)
            if self._set_ws is None:         # CuPy's raw binding has none: call the library
                self._set_ws, self.no_workspace = workspace_setter_of_loaded_cublas()
            host = lib.CUBLAS_POINTER_MODE_HOST
            self._set_math = lib.setMathMode
            self._math_modes = {"float32": getattr(lib, "CUBLAS_DEFAULT_MATH", 0),
                                "tf32": getattr(lib, "CUBLAS_TF32_TENSOR_OP_MATH", 3)}
            self._gemm = {"float32": lib.sgemmStridedBatched, "float64": lib.dgemmStridedBatched}
            self._gemm_ex = getattr(lib, "gemmStridedBatchedEx", None)
        self.handle = self._create()
        self._set_pm(self.handle, host)          # alpha, beta: host scalars, read at enqueue
        self.workspace = None
        self.capture_safe = False
        if self._set_ws is not None:
            self.workspace = driver.alloc(self.WORKSPACE_BYTES, np.dtype(np.uint8))
            self._set_ws(self.handle, _ptr(self.workspace), self.WORKSPACE_BYTES)
            self.capture_safe = True
        elif driver is not None:
            driver.warn_once(
                "blas-graphs", f"jitgraph: CUDA graphs are off for programs with matrix "
                f"products: cuBLAS ({name}'s binding) has no workspace jitgraph could set "
                f"({self.no_workspace}), and a GEMM captured without one may allocate. Those "
                "programs launch kernel by kernel; install nvmath-python "
                "(pip install 'jitgraph[cuda]') for graphs with cuBLAS.")
        self._stream = None
        self._math = None             # the math mode set on the handle (config's precision)
        self._scalars: dict = {}

    no_workspace = ""                 # why no workspace could be set, where none could

    def scalar(self, value: float, dt: np.dtype) -> np.ndarray:
        """A host scalar for cuBLAS, made once per value (read when the call is queued)."""
        key = (value, dt)
        a = self._scalars.get(key)
        if a is None:
            a = self._scalars[key] = np.array(value, dt)
        return a

    @property
    def has_gemm_ex(self) -> bool:
        return self._gemm_ex is not None

    def _use(self, stream: int) -> None:
        """The handle on ``stream``, with our workspace set again (see ``gemm``)."""
        self._set_stream(self.handle, stream)
        self._stream = stream
        if self.workspace is not None:
            self._set_ws(self.handle, _ptr(self.workspace), self.WORKSPACE_BYTES)

    def gemm_ex(self, stream: int, operands: str, call: "BlasCall", al: int, be: int,
                pa: int, sa: int, pb: int, sb: int, pc: int, sc: int, batch: int) -> None:
        """One strided-batched GEMM of 16-bit float operands (``operands``: "float16" or
        "bfloat16") into a float32 result, accumulated in float32
        (``cublasGemmStridedBatchedEx`` with ``CUBLAS_COMPUTE_32F``: tensor cores on Volta
        and later); ``al``/``be``: float32 host scalars."""
        if stream != self._stream:
            self._use(stream)
        t = CUDA_R_16F if operands == "float16" else CUDA_R_16BF
        self._gemm_ex(self.handle, self.ops[call.transa], self.ops[call.transb],
                      call.m, call.n, call.k, al, pb, t, call.lda, sb, pa, t, call.ldb, sa,
                      be, pc, CUDA_R_32F, call.ldc, sc, batch, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT)

    def gemm(self, stream: int, dtype_name: str, call: "BlasCall", al: int, be: int,
             pa: int, sa: int, pb: int, sb: int, pc: int, sc: int, batch: int) -> None:
        """One strided-batched GEMM (``BlasCall``: cuBLAS's A is our B); ``al``/``be``: the
        addresses of host scalars from ``scalar``. The handle's math mode follows
        ``jitgraph.config``'s ``matmul_precision`` (TF32 tensor-core math for "tf32")."""
        if stream != self._stream:
            # cublasSetStream puts the handle back on cuBLAS's default workspace pool (as
            # PyTorch does, set ours again after it): a GEMM captured into a CUDA graph must
            # not allocate from that pool
            self._use(stream)
        precision = config.read("matmul_precision")   # float32 or TF32 tensor-core math
        if precision != self._math:
            self._set_math(self.handle, self._math_modes[precision])
            self._math = precision
        self._gemm[dtype_name](self.handle, self.ops[call.transa], self.ops[call.transb],
                               call.m, call.n, call.k, al, pb, call.lda, sb,
                               pa, call.ldb, sa, be, pc, call.ldc, sc, batch)


#: the bindings tried, in order: (name in ``Blas``, module, what a report calls it)
BINDINGS = (("nvmath", "nvmath.bindings.cublas", "nvmath-python"),
            ("cupy", "cupy_backends.cuda.libs.cublas", "CuPy"))


def preload_cublas() -> str:
    """Load ``libcublas`` from NVIDIA's wheel (``nvidia-cublas``) through ``cuda.pathfinder``
    before a binding imports: CuPy's raw binding finds it by name on the loader's path, which a
    pip-only environment does not have (its ``import`` then fails with ``libcublas.so.13``
    missing). Returns what happened, for the report."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError:
        return "cuda.pathfinder is not installed"
    try:
        loaded = load_nvidia_dynamic_lib("cublas")
    except Exception as e:          # no cuBLAS wheel: the system's library may still load
        return f"{type(e).__name__}: {e}"
    return f"loaded {getattr(loaded, 'abs_path', None) or 'libcublas'}"


def loaded_library(prefix: str, maps: str = "/proc/self/maps") -> str | None:
    """The path of a shared library ``<prefix>.so*`` this process has loaded (Linux), or None:
    the very file a binding loaded, so a handle it made is valid there."""
    try:
        with open(maps) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(maxsplit=5)        # address perms offset dev inode [path]
        path = parts[5] if len(parts) == 6 else ""
        if os.path.basename(path).startswith(prefix + ".so"):
            return path
    return None


def workspace_setter_of_loaded_cublas():
    """``(set_workspace(handle, ptr, nbytes), "")`` calling ``cublasSetWorkspace_v2`` of the
    libcublas this process loaded, through ctypes, or ``(None, why not)``."""
    import ctypes
    path = loaded_library("libcublas")
    if path is None:
        return None, "no libcublas is loaded in this process"
    try:
        fn = ctypes.CDLL(path).cublasSetWorkspace_v2
    except (OSError, AttributeError) as e:
        return None, f"{path}: {e}"
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int

    def set_workspace(handle: int, ptr: int, nbytes: int) -> None:
        status = fn(handle, ptr, nbytes)
        if status != 0:
            raise RuntimeError(f"cublasSetWorkspace_v2 failed with status {status} ({path})")
    return set_workspace, ""


def load_blas(driver, mode: str | None = None) -> tuple["Blas | None", str]:
    """The driver's cuBLAS binding (made once per driver), or None and why not. ``mode``
    (default: ``JITGRAPH_CUDA_MATMUL``, ``auto``): ``fallback`` for the tiled kernel, or a
    binding's name (``nvmath``, ``cupy``) to take only that one."""
    if "blas" in driver.libraries and mode is None:
        return driver.libraries["blas"]
    mode = mode or os.environ.get("JITGRAPH_CUDA_MATMUL", "auto")
    res: tuple = (None, "")
    if mode == "fallback":
        res = (None, "JITGRAPH_CUDA_MATMUL=fallback")
    elif os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        res = (None, "the CUDA simulator has no cuBLAS")
    else:
        preloaded = preload_cublas()
        errors = []
        for name, module, _ in BINDINGS:
            if mode not in ("auto", name):
                continue
            try:
                import importlib
                res = (Blas(name, importlib.import_module(module), driver), "")
                break
            except Exception as e:      # not installed, or a binding that does not load
                errors.append(f"{module}: {type(e).__name__}: {e}")
        else:
            res = (None, "; ".join(errors) + f" (libcublas preload: {preloaded})")
    driver.libraries["blas"] = res
    return res


def select_matmul(driver, mode: str) -> tuple["Blas | None", str]:
    """Switch the driver's products to ``mode`` (``auto``, ``fallback``, ``nvmath``, ``cupy``)
    from now on: every prepared ``Product`` binds again on its next call (the binding is
    cached per driver, so setting ``JITGRAPH_CUDA_MATMUL`` after the first product changes
    nothing). A program already captured as a CUDA graph keeps what it captured."""
    return load_blas(driver, mode)       # (a mode given: made again, whatever is cached)


def binding_label(driver, why: bool = False) -> str:
    """What products run on now: ``cuBLAS (nvmath-python)``, ``cuBLAS (CuPy)`` or ``tiled
    kernel`` (with ``why``: and the reason no cuBLAS), as benchmark rows name it."""
    blas, reason = load_blas(driver)
    if blas is None:
        return "tiled kernel" + (f" ({reason})" if why and reason else "")
    return f"cuBLAS ({dict((n, label) for n, _, label in BINDINGS)[blas.name]})"


def cublas_available(driver=None) -> bool:
    """A cuBLAS binding loaded (a real GPU, nvmath-python or CuPy, not switched off)."""
    if driver is None:
        from jitgraph.cuda_driver import driver as current
        driver = current()
    return load_blas(driver)[0] is not None


def capture_safe(driver) -> bool:
    """Whether products can go into a CUDA graph capture: the tiled kernel always can; cuBLAS
    when its workspace is preallocated."""
    blas = load_blas(driver)[0]
    return blas is None or blas.capture_safe


def _ptr(x) -> int:
    from jitgraph.device import buffer_pointer
    return buffer_pointer(x)


def matmul(a, a_spec, b, b_spec, out, m, n, k, batch=1, alpha=1.0, beta=0.0, c=None,
           driver=None) -> None:
    """``out = alpha * op(A) @ op(B) + beta * c`` on flat device arrays (c may be ``out``),
    once: a ``Product`` made for this call (generated programs keep theirs)."""
    if driver is None:
        from jitgraph.cuda_driver import driver as current
        driver = current()
    Product(driver, a_spec, b_spec, m, n, k, batch, alpha, beta, np.dtype(out.dtype))(
        a, b, out, c)


_UNBOUND = object()


class Product:
    """One product ``out = alpha * op(A) @ op(B) + beta * c``, prepared once: on its first
    call it picks cuBLAS (where a binding loads) or the tiled kernel (with a one-time warning
    naming why, on a real GPU) and fixes the cuBLAS call (transposes, leading dimensions,
    batch strides, host scalars), so a cached call does one pointer lookup per operand (a
    table hit) and one library call. ``c``, when another buffer, is copied into ``out``
    first."""

    def __init__(self, driver, a_spec, b_spec, m, n, k, batch, alpha, beta, dtype: np.dtype,
                 operands: str | None = None):
        self.driver = driver
        self.args = (a_spec, b_spec, m, n, k, batch, alpha, beta)
        self.dtype = dtype
        self.operands = operands         # both operands' 16-bit float type (GemmEx), or None
        self.dtype_name = dtype.name            # (a property NumPy computes on each read)
        self.blas = None
        self.bound: object = _UNBOUND        # the driver's binding entry it was prepared for

    def _bind(self) -> None:
        a_spec, b_spec, m, n, k, batch, alpha, beta = self.args
        dt = self.dtype
        self.blas = None
        if m * n and dt.kind == "f" and dt.itemsize >= 4 and k > 0:
            self.blas, why = load_blas(self.driver)
            if self.blas is None and not why.startswith(("JITGRAPH_CUDA_MATMUL",
                                                         "the CUDA simulator")):
                self.driver.warn_once(
                    "blas", "jitgraph: no cuBLAS binding could be loaded (" + why + "); "
                    "matrix products use jitgraph's tiled GEMM kernel, several times slower. "
                    "Install nvmath-python or CuPy (pip install 'jitgraph[cuda]').")
        if self.blas is not None and self.operands and not self.blas.has_gemm_ex:
            self.driver.warn_once(
                "blas-ex", f"jitgraph: {self.blas.name}'s cuBLAS binding has no GemmEx: "
                f"products of {self.operands} operands use jitgraph's tiled GEMM kernel")
            self.blas = None
        if self.blas is not None:
            self.call = blas_call(a_spec, b_spec, m, n, k)
            self.strides = (a_spec[0] * a_spec[1], b_spec[0] * b_spec[1], m * n)
            self.scalars = tuple(self.blas.scalar(v, dt).ctypes.data
                                 for v in (alpha, beta, 0.0))
        self.bound = self.driver.libraries.get("blas")

    def __call__(self, a, b, out, c=None) -> None:
        a_spec, b_spec, m, n, k, batch, alpha, beta = self.args
        if m * n == 0:
            return
        if self.bound is not self.driver.libraries.get("blas"):    # first call, or rebound
            self._bind()
        blas, d = self.blas, self.driver
        if blas is None:
            tile = SIM_TILE if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else GPU_TILE
            gemm_fallback(a, a_spec, b, b_spec, out, m, n, k, batch, alpha, beta, c, tile,
                          driver=d, operands=self.operands)
            return
        al, be, zero = self.scalars
        if c is None:
            be = zero
        elif beta != 0 and c is not out:
            d.copy(out, c)
        sa, sb, sc = self.strides
        ptr = d.pointer
        if self.operands:
            d.library_call(blas.gemm_ex, d.stream_handle, self.operands, self.call, al, be,
                           ptr(a), sa, ptr(b), sb, ptr(out), sc, batch)
            return
        d.library_call(blas.gemm, d.stream_handle, self.dtype_name, self.call, al, be,
                       ptr(a), sa, ptr(b), sb, ptr(out), sc, batch)
