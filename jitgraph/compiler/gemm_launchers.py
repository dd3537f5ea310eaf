"""The products a driver in Python calls (``blas_gemm``, ``par_gemm``, ``par_batched_gemm``)
as CPython built-in functions written in LLVM IR, not Numba functions.

Why: ``kernels/matmul.py``'s Numba versions were the last Numba code most programs run. On
a machine's first run they compiled for about 1.1 s of CPU (``par_gemm`` is a ``prange``
function: Numba's parfor passes, then its body again as a gufunc); in every new process each
signature then cost about 60 ms to load from Numba's cache, and the first product of a
process imported Numba. The functions here do what those do, with the same threads: each
checks its arguments (a Python float, a C-contiguous float32 or float64 array, an int ...),
releases the GIL and calls one Fortran ``?gemm`` (``kernels/blas.py``'s symbols), or, split
over Numba's threading layer (``numba_parallel_for``, as every ``prange`` loop and
``threaded.py``'s launchers), one one-thread ``?gemm`` per band of rows or columns, per part
of a deep product's contraction (``kernels/gemm_split.py``; the parts then added in order), or
per product of a batch, each thread taking the next band from a shared counter. The module is
compiled by LLVM once per process (about 15 ms).

Anything else (another argument type, a dimension over 2**31 - 1, operand shapes that do
not multiply) goes to :func:`_fallback`: a clear error, or the Numba function (which raises
its own error for oversized products).
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Callable

import numpy as np

from . import native, numba_patches, threaded
from .state import STATE
from ..kernels import gemm_split  # type: ignore[attr-defined]  (no Numba)

#: the functions, and whether each takes a batch (3-d operands)
NAMES = {"blas_gemm": False, "par_gemm": False, "par_batched_gemm": True}
_TYPES = (("f32", "float", np.dtype(np.float32), "jitgraph_sgemm64"),
          ("f64", "double", np.dtype(np.float64), "jitgraph_dgemm64"))
_INT32_MAX = 2**31 - 1
# the block a product's threads share (i64 slots)
(_CTR, _PARTS, _BYROWS, _SIZE, _A, _B, _C, _AC, _BC, _M, _N, _K, _TA, _TB, _ALPHA, _BETA, _SA,
 _SB, _SC, _BATCH, _PBUF) = range(21)
_SLOTS = _PBUF + 1
_LOCK = threading.Lock()


def _slot(name: str, index: int, ty: str = "i64", block: str = "%blk") -> list[str]:
    """Load slot ``index`` of the shared block into ``%name``."""
    return [f"  %{name}p = getelementptr i64, ptr {block}, i64 {index}",
            f"  %{name} = load {ty}, ptr %{name}p"]


def _store(index: int, value: str, ty: str = "i64", tag: str = "s") -> list[str]:
    """Store ``value`` in slot ``index`` of the shared block (``tag``: a prefix keeping the
    pointer's name unique where a function stores one slot twice)."""
    return [f"  %{tag}{index}p = getelementptr i64, ptr %blk, i64 {index}",
            f"  store {ty} {value}, ptr %{tag}{index}p"]


def _tile_ir(t: str, real: str, gemm: str) -> str:
    """``@jgp_tile_<t>(blk, a, b, c, r0, r1, c0, c1, k0, k1, zero_beta)``: rows ``r0:r1``,
    columns ``c0:c1`` of ``c = alpha * op(a) @ op(b) + beta * c`` over the contraction's
    indices ``k0:k1`` (beta 0 where ``zero_beta``) for one product whose operands start at
    ``a``, ``b``, ``c`` (shapes and flags in the block), one ``?gemm`` call on its
    column-major transpose, C^T = op(B)^T op(A)^T, as ``kernels/matmul.py``'s
    ``_xxgemm_block``."""
    loads = []
    for name, index in (("ac", _AC), ("bc", _BC), ("n", _N), ("ta", _TA), ("tb", _TB)):
        loads += _slot(name, index)
    wide = "d" if real == "float" else ""       # float32: the doubles, then rounded
    for name, index in (("alpha", _ALPHA), ("beta0", _BETA)):
        loads += _slot(name + wide, index, "double")
    conv = ("  %alpha = fptrunc double %alphad to float\n"
            "  %beta0 = fptrunc double %beta0d to float" if wide else "")
    refs = {"tb_": "i8", "ta_": "i8", "nn": "i64", "mm": "i64", "kk": "i64", "al": real,
            "ldb": "i64", "lda": "i64", "be": real, "ldc": "i64"}
    values = {"tb_": "%tch_b", "ta_": "%tch_a", "nn": "%ncols", "mm": "%nrows", "kk": "%nk",
              "al": "%alpha", "ldb": "%bc", "lda": "%ac", "be": "%beta", "ldc": "%n"}
    allocas = [f"  %r_{r} = alloca {ty}, align 8\n  store {ty} {values[r]}, ptr %r_{r}"
               for r, ty in refs.items()]
    return "\n".join([
        f"define internal void @jgp_tile_{t}(ptr %blk, ptr %a, ptr %b, ptr %c, i64 %r0, "
        "i64 %r1, i64 %c0, i64 %c1, i64 %k0, i64 %k1, i64 %zero_beta) {",
        "entry:", *loads, conv,
        "  %zb = icmp ne i64 %zero_beta, 0",
        f"  %beta = select i1 %zb, {real} 0.0, {real} %beta0",
        "  %tab = icmp ne i64 %ta, 0",
        "  %tbb = icmp ne i64 %tb, 0",
        "  %tch_a = select i1 %tab, i8 84, i8 78",        # 'T' / 'N'
        "  %tch_b = select i1 %tbb, i8 84, i8 78",
        # op(a)'s rows r0.. and columns k0..: stored rows and columns, or the other way round
        # where transposed; op(b)'s rows k0.. and columns c0..: the mirror image
        "  %akr = mul i64 %k0, %ac",
        "  %aoff_t = add i64 %akr, %r0",
        "  %arow = mul i64 %r0, %ac",
        "  %aoff_n = add i64 %arow, %k0",
        "  %aoff = select i1 %tab, i64 %aoff_t, i64 %aoff_n",
        "  %bcol = mul i64 %c0, %bc",
        "  %boff_t = add i64 %bcol, %k0",
        "  %bkr = mul i64 %k0, %bc",
        "  %boff_n = add i64 %bkr, %c0",
        "  %boff = select i1 %tbb, i64 %boff_t, i64 %boff_n",
        "  %crow = mul i64 %r0, %n",
        "  %coff = add i64 %crow, %c0",
        f"  %ap = getelementptr {real}, ptr %a, i64 %aoff",
        f"  %bp = getelementptr {real}, ptr %b, i64 %boff",
        f"  %cp = getelementptr {real}, ptr %c, i64 %coff",
        "  %nrows = sub i64 %r1, %r0",
        "  %ncols = sub i64 %c1, %c0",
        "  %nk = sub i64 %k1, %k0",
        *allocas,
        f"  call void @{gemm}(ptr %r_tb_, ptr %r_ta_, ptr %r_nn, ptr %r_mm, ptr %r_kk, "
        "ptr %r_al, ptr %bp, ptr %r_ldb, ptr %ap, ptr %r_lda, ptr %r_be, ptr %cp, ptr %r_ldc)",
        "  ret void", "}", ""])


def _take_parts(size: str) -> list[str]:
    """A worker's loop head: part ``%p`` of ``%parts`` taken from the block's shared counter
    until none is left, and its share ``%lo:%hi`` of ``size``; ``_NEXT_PART`` closes it."""
    return ["  br label %loop",
            "loop:",
            "  %p = atomicrmw add ptr %ctrp, i64 1 monotonic",
            "  %more = icmp slt i64 %p, %parts",
            "  br i1 %more, label %body, label %done",
            "body:",
            f"  %lo0 = mul i64 %p, {size}",
            "  %lo = sdiv i64 %lo0, %parts",
            "  %p1 = add i64 %p, 1",
            f"  %hi0 = mul i64 %p1, {size}",
            "  %hi = sdiv i64 %hi0, %parts"]


_NEXT_PART = ["  br label %loop", "done:", "  ret void", "}", ""]


def _workers_ir(t: str, real: str) -> str:
    """What each thread runs (``numba_parallel_for``'s kernel signature): ``@jgp_band_<t>``
    takes bands of one product's rows or columns, ``@jgp_deep_<t>`` parts of a deep product's
    contraction (each into its own array of the block's buffer), ``@jgp_batch_<t>`` products
    of a batch, each from the block's shared counter until none is left."""
    head = ["entry:", *_slot("ctr", _CTR, "i64", "%data")[:1],   # (its address)
            *_slot("parts", _PARTS, "i64", "%data")]
    common = [*_slot("a", _A, "ptr", "%data"), *_slot("b", _B, "ptr", "%data"),
              *_slot("c", _C, "ptr", "%data")]
    band = [
        f"define internal void @jgp_band_{t}(ptr %args, ptr %dims, ptr %steps, ptr %data) {{",
        *head, *common, *_slot("byrows", _BYROWS, "i64", "%data"),
        *_slot("size", _SIZE, "i64", "%data"), *_slot("m", _M, "i64", "%data"),
        *_slot("n", _N, "i64", "%data"), *_slot("k", _K, "i64", "%data"),
        "  %rows = icmp ne i64 %byrows, 0",
        *_take_parts("%size"),
        "  %r0 = select i1 %rows, i64 %lo, i64 0",
        "  %r1 = select i1 %rows, i64 %hi, i64 %m",
        "  %c0 = select i1 %rows, i64 0, i64 %lo",
        "  %c1 = select i1 %rows, i64 %n, i64 %hi",
        f"  call void @jgp_tile_{t}(ptr %data, ptr %a, ptr %b, ptr %c, i64 %r0, i64 %r1, "
        "i64 %c0, i64 %c1, i64 0, i64 %k, i64 0)", *_NEXT_PART]
    deep = [
        f"define internal void @jgp_deep_{t}(ptr %args, ptr %dims, ptr %steps, ptr %data) {{",
        *head, *common, *_slot("pbuf", _PBUF, "ptr", "%data"),
        *_slot("m", _M, "i64", "%data"), *_slot("n", _N, "i64", "%data"),
        *_slot("k", _K, "i64", "%data"),
        "  %mn = mul i64 %m, %n",
        *_take_parts("%k"),
        "  %po = mul i64 %p, %mn",
        f"  %pp = getelementptr {real}, ptr %pbuf, i64 %po",
        f"  call void @jgp_tile_{t}(ptr %data, ptr %a, ptr %b, ptr %pp, i64 0, i64 %m, "
        "i64 0, i64 %n, i64 %lo, i64 %hi, i64 1)", *_NEXT_PART]
    batch = [
        f"define internal void @jgp_batch_{t}(ptr %args, ptr %dims, ptr %steps, ptr %data) {{",
        *head, *common,
        *_slot("m", _M, "i64", "%data"), *_slot("n", _N, "i64", "%data"),
        *_slot("sa", _SA, "i64", "%data"), *_slot("sb", _SB, "i64", "%data"),
        *_slot("sc", _SC, "i64", "%data"), *_slot("batch", _BATCH, "i64", "%data"),
        *_slot("k", _K, "i64", "%data"),
        "  br label %loop",
        "loop:",
        "  %i = atomicrmw add ptr %ctrp, i64 1 monotonic",
        "  %more = icmp slt i64 %i, %batch",
        "  br i1 %more, label %body, label %done",
        "body:",
        "  %oa = mul i64 %i, %sa",
        "  %ob = mul i64 %i, %sb",
        "  %oc = mul i64 %i, %sc",
        f"  %ai = getelementptr {real}, ptr %a, i64 %oa",
        f"  %bi = getelementptr {real}, ptr %b, i64 %ob",
        f"  %ci = getelementptr {real}, ptr %c, i64 %oc",
        f"  call void @jgp_tile_{t}(ptr %data, ptr %ai, ptr %bi, ptr %ci, i64 0, i64 %m, "
        "i64 0, i64 %n, i64 0, i64 %k, i64 0)",
        "  br label %loop",
        "done:", "  ret void", "}", ""]
    return "\n".join(band + deep + batch)


def _shape_ir(nd: int) -> list[str]:
    """Read the three arrays' shapes (``%a0``..``%a2``: a, b, c, checked already) into
    ``%ar %ac %br %bc %m %n`` (and ``%batch``, each operand's leading dimension equal) and
    check that op(a) @ op(b) has c's shape: else status 2."""
    lines = []
    for i, names in enumerate((("ar", "ac"), ("br", "bc"), ("m", "n"))):
        dims = (f"q{i}",) * (nd == 3) + names
        for j, name in enumerate(dims):
            lines += [f"  %{name}p = getelementptr i64, ptr %h{i}, i64 {j}",
                      f"  %{name} = load i64, ptr %{name}p"]
    lines += ["  %tab = icmp ne i64 %ta, 0",
              "  %tbb = icmp ne i64 %tb, 0",
              "  %k = select i1 %tab, i64 %ar, i64 %ac",
              "  %am = select i1 %tab, i64 %ac, i64 %ar",
              "  %bk = select i1 %tbb, i64 %bc, i64 %br",
              "  %bn = select i1 %tbb, i64 %br, i64 %bc",
              "  %e1 = icmp eq i64 %am, %m",
              "  %e2 = icmp eq i64 %bk, %k",
              "  %e3 = icmp eq i64 %bn, %n",
              "  %e12 = and i1 %e1, %e2",
              "  %fits = and i1 %e12, %e3"]
    if nd == 3:
        lines += ["  %eqa = icmp eq i64 %q0, %q2",
                  "  %eqb = icmp eq i64 %q1, %q2",
                  "  %eqab = and i1 %eqa, %eqb",
                  "  %fits1 = and i1 %fits, %eqab",
                  "  %batch = add i64 %q2, 0"]
    else:
        lines += ["  %fits1 = and i1 %fits, 1", "  %batch = add i64 1, 0"]
    return lines + ["  br i1 %fits1, label %shaped, label %shapes", "shaped:"]


def _deep_check_ir() -> list[str]:
    """Branch to ``%deepalloc`` where ``par_gemm``'s product is deep (``gemm_split``), else to
    ``%band``."""
    g = gemm_split
    return ["  %dk1 = icmp sge i64 %k, " + str(g.DEEP_MIN_K),
            "  %dmn = icmp sle i64 %mn, " + str(g.DEEP_MAX_OUT),
            "  %mgt = icmp sgt i64 %m, %n",
            "  %mside = select i1 %mgt, i64 %m, i64 %n",
            "  %rk = mul i64 %mside, " + str(g.DEEP_MIN_RATIO),
            "  %dk2 = icmp sge i64 %k, %rk",
            "  %dp0 = and i1 %dk1, %dmn",
            "  %isdeep = and i1 %dp0, %dk2",
            "  br i1 %isdeep, label %deepalloc, label %band"]


def _deep_ir(t: str, real: str, dtype: np.dtype) -> list[str]:
    """A deep product: its parts' products into one buffer (``@jgp_deep_<t>`` on the threads),
    then ``c = the parts' sum, in part order, + beta * c`` (c not read where beta is 0; the
    sum in ``real``, the beta term in double, as ``kernels/matmul.py``'s ``_add_parts``). The
    band split where the buffer cannot be had."""
    g = gemm_split
    if real == "float":
        beta_term = ["  %cvd = fpext float %cv to double",
                     "  %bm = fmul double %beta, %cvd",
                     "  %accd = fpext float %acc to double",
                     "  %rd = fadd double %accd, %bm",
                     "  %rv = fptrunc double %rd to float"]
    else:
        beta_term = ["  %bm = fmul double %beta, %cv",
                     "  %rv = fadd double %acc, %bm"]
    return [
        "deepalloc:",
        "  %kq = sdiv i64 %k, " + str(g.DEEP_PART_K),
        "  %kbig = icmp sgt i64 %kq, " + str(g.DEEP_MAX_PARTS),
        f"  %kparts = select i1 %kbig, i64 {g.DEEP_MAX_PARTS}, i64 %kq",
        "  %pn = mul i64 %kparts, %mn",
        f"  %pbytes = mul i64 %pn, {dtype.itemsize}",
        "  %pbuf = call ptr @PyMem_RawMalloc(i64 %pbytes)",
        "  %pnull = icmp eq ptr %pbuf, null",
        "  br i1 %pnull, label %band, label %deep",
        "deep:",
        *_store(_PARTS, "%kparts", tag="deep_slot"),
        *_store(_PBUF, "%pbuf", "ptr", tag="deep_slot"),
        "  %dnt0 = call i64 @get_num_threads()",
        "  %dntpos = icmp sgt i64 %dnt0, 0",
        "  %dnt = select i1 %dntpos, i64 %dnt0, i64 1",
        "  %dfew = icmp slt i64 %kparts, %dnt",
        "  %dthreads = select i1 %dfew, i64 %kparts, i64 %dnt",
        "  store ptr %blk, ptr %argv",
        "  store i64 %dthreads, ptr %shape",
        "  %dshape1 = getelementptr i64, ptr %shape, i64 1",
        "  store i64 1, ptr %dshape1",
        "  store i64 0, ptr %steps",
        "  %done1 = icmp slt i64 %dthreads, 2",
        "  br i1 %done1, label %dalone, label %dpool",
        "dalone:",
        f"  call void @jgp_deep_{t}(ptr %argv, ptr %shape, ptr %steps, ptr %blk)",
        "  br label %dsum",
        "dpool:",
        f"  call void @numba_parallel_for(ptr @jgp_deep_{t}, ptr %argv, ptr %shape, "
        "ptr %steps, ptr %blk, i64 1, i64 1, i64 %dthreads)",
        "  br label %dsum",
        "dsum:",
        "  %bzero = fcmp oeq double %beta, 0.0",
        "  br label %dsl",
        "dsl:",
        "  %di = phi i64 [0, %dsum], [%di1, %dsn]",
        f"  %q0p = getelementptr {real}, ptr %pbuf, i64 %di",
        f"  %q0 = load {real}, ptr %q0p",
        "  br label %dpl",
        "dpl:",
        "  %dp = phi i64 [1, %dsl], [%dp1, %dplb]",
        f"  %acc = phi {real} [%q0, %dsl], [%acc1, %dplb]",
        "  %dpm = icmp slt i64 %dp, %kparts",
        "  br i1 %dpm, label %dplb, label %dsx",
        "dplb:",
        "  %qo = mul i64 %dp, %mn",
        "  %qi = add i64 %qo, %di",
        f"  %qp = getelementptr {real}, ptr %pbuf, i64 %qi",
        f"  %qv = load {real}, ptr %qp",
        f"  %acc1 = fadd {real} %acc, %qv",
        "  %dp1 = add i64 %dp, 1",
        "  br label %dpl",
        "dsx:",
        f"  %cpp = getelementptr {real}, ptr %d2, i64 %di",
        "  br i1 %bzero, label %dsz, label %dsb",
        "dsb:",
        f"  %cv = load {real}, ptr %cpp",
        *beta_term,
        f"  store {real} %rv, ptr %cpp",
        "  br label %dsn",
        "dsz:",
        f"  store {real} %acc, ptr %cpp",
        "  br label %dsn",
        "dsn:",
        "  %di1 = add i64 %di, 1",
        "  %dend = icmp eq i64 %di1, %mn",
        "  br i1 %dend, label %dfree, label %dsl",
        "dfree:",
        "  call void @PyMem_RawFree(ptr %pbuf)",
        "  br label %joined"]


def _function_ir(name: str, t: str, real: str, dtype: np.dtype) -> str:
    """``@jgp_<name>_<t>(a, b, c, alpha, ta, tb, beta)``: the product for arrays of one
    dtype; 0 when done, 1 when an array is not of its kind, 2 when the shapes do not
    multiply, 3 when a dimension exceeds 32 bits (then nothing was written)."""
    nd = 3 if NAMES[name] else 2
    checks = []
    for i in range(3):
        checks += native.check_ir(i, ("a", dtype.str, nd, "C", True, True), flags=(i == 2))
        checks += native.array_fields_ir(i)
    stores = []
    for index, value, ty in ((_CTR, "0", "i64"), (_A, "%d0", "ptr"), (_B, "%d1", "ptr"),
                             (_C, "%d2", "ptr"), (_AC, "%ac", "i64"), (_BC, "%bc", "i64"),
                             (_M, "%m", "i64"),
                             (_N, "%n", "i64"), (_K, "%k", "i64"), (_TA, "%ta", "i64"),
                             (_TB, "%tb", "i64"), (_ALPHA, "%alpha", "double"),
                             (_BETA, "%beta", "double"), (_SA, "%sa", "i64"),
                             (_SB, "%sb", "i64"), (_SC, "%mn", "i64"), (_BATCH, "%batch", "i64")):
        stores += _store(index, value, ty)
    if name == "blas_gemm":
        run = [f"  call void @jgp_tile_{t}(ptr %blk, ptr %d0, ptr %d1, ptr %d2, i64 0, i64 %m, "
               "i64 0, i64 %n, i64 0, i64 %k, i64 0)"]
    else:
        batched = NAMES[name]
        size = ["  %size = add i64 %batch, 0"] if batched else [
            "  %byrows = icmp sge i64 %m, %n",
            "  %size = select i1 %byrows, i64 %m, i64 %n",
            "  %byrows64 = zext i1 %byrows to i64", *_store(_BYROWS, "%byrows64"),
            *_store(_SIZE, "%size")]
        worker = f"@jgp_{'batch' if batched else 'band'}_{t}"
        serial = (f"  call void {worker}(ptr %argv, ptr %shape, ptr %steps, ptr %blk)"
                  if batched else
                  f"  call void @jgp_tile_{t}(ptr %blk, ptr %d0, ptr %d1, ptr %d2, i64 0, "
                  "i64 %m, i64 0, i64 %n, i64 0, i64 %k, i64 0)")
        run = [*size,
               "  %nt0 = call i64 @get_num_threads()",
               "  %ntpos = icmp sgt i64 %nt0, 0",
               "  %nt = select i1 %ntpos, i64 %nt0, i64 1",
               "  %few = icmp slt i64 %size, %nt",
               "  %parts = select i1 %few, i64 %size, i64 %nt",
               *_store(_PARTS, "%parts"),
               "  store ptr %blk, ptr %argv",
               "  store i64 %parts, ptr %shape",
               "  %shape1 = getelementptr i64, ptr %shape, i64 1",
               "  store i64 1, ptr %shape1",
               "  store i64 0, ptr %steps",
               "  %one = icmp slt i64 %parts, 2",
               "  br i1 %one, label %alone, label %pool",
               "alone:", serial, "  br label %joined",
               "pool:",
               f"  call void @numba_parallel_for(ptr {worker}, ptr %argv, ptr %shape, "
               "ptr %steps, ptr %blk, i64 1, i64 1, i64 %parts)",
               "  br label %joined",
               *([] if batched else _deep_ir(t, real, dtype)),
               "joined:"]
        if not batched:
            run = _deep_check_ir() + ["band:"] + run
    return "\n".join([
        f"define internal i32 @jgp_{name}_{t}(ptr %a0, ptr %a1, ptr %a2, double %alpha, "
        "i64 %ta, i64 %tb, double %beta) {",
        "entry:",
        f"  %blk = alloca [{_SLOTS} x i64], align 16",
        "  %argv = alloca ptr, align 8",
        "  %shape = alloca [2 x i64], align 8",
        "  %steps = alloca i64, align 8",
        *checks, *_shape_ir(nd),
        "  %mn = mul i64 %m, %n",
        "  %sa = mul i64 %ar, %ac",
        "  %sb = mul i64 %br, %bc",
        "  %total = mul i64 %mn, %batch",
        "  %empty = icmp eq i64 %total, 0",
        "  br i1 %empty, label %done, label %nonempty",
        "nonempty:",
        "  %kzero = icmp eq i64 %k, 0",
        "  br i1 %kzero, label %scale, label %sized",
        # an empty contraction: c = beta * c (0 where beta is 0; BLAS leaves it undefined)
        "scale:",
        "  %bz = fcmp oeq double %beta, 0.0",
        "  br label %sloop",
        "sloop:",
        "  %si = phi i64 [0, %scale], [%si1, %sloop]",
        f"  %sp = getelementptr {real}, ptr %d2, i64 %si",
        f"  %sv = load {real}, ptr %sp",
        *(["  %svd = fpext float %sv to double",    # (Numba's: beta * c[i, j] in float64)
           "  %sm = fmul double %beta, %svd",
           "  %sr = select i1 %bz, double 0.0, double %sm",
           "  %srt = fptrunc double %sr to float"] if real == "float" else
          ["  %sm = fmul double %beta, %sv",
           "  %srt = select i1 %bz, double 0.0, double %sm"]),
        f"  store {real} %srt, ptr %sp",
        "  %si1 = add i64 %si, 1",
        "  %sdone = icmp eq i64 %si1, %total",
        "  br i1 %sdone, label %done, label %sloop",
        "sized:",
        "  %big1 = icmp sgt i64 %m, " + str(_INT32_MAX),
        "  %big2 = icmp sgt i64 %n, " + str(_INT32_MAX),
        "  %big3 = icmp sgt i64 %k, " + str(_INT32_MAX),
        "  %big12 = or i1 %big1, %big2",
        "  %big = or i1 %big12, %big3",
        "  br i1 %big, label %large, label %go",
        "go:", *stores,
        "  %ts = call ptr @PyEval_SaveThread()",
        *run,
        "  call void @PyEval_RestoreThread(ptr %ts)",
        "  br label %done",
        "done:", "  ret i32 0",
        "bad:", "  ret i32 1",
        "shapes:", "  ret i32 2",
        "large:", "  ret i32 3",
        "}", ""])


def _entry_ir(name: str) -> str:
    """``@jgp_<name>(self, args, nargs)``, the built-in (``METH_FASTCALL``): unbox the two
    floats and the two flags (``native.scalar_ir``), try each dtype's function; anything but
    success calls the fallback (``@jgp_fallback_<name>``, a Python callable) with the same
    arguments."""
    unbox = []      # arguments 0 and 5: exact floats; 2 and 4: exact ints, as flags
    for pos in range(7):
        unbox += [f"  %a{pos}pp = getelementptr ptr, ptr %args, i64 {pos}",
                  f"  %a{pos} = load ptr, ptr %a{pos}pp"]
        if pos in (0, 5):
            unbox += native.scalar_ir(pos, "jgw_float", "PyFloat_AsDouble", "double", "fallback")
        elif pos in (2, 4):          # (PyObject_IsTrue of an exact int never fails)
            unbox += native.scalar_ir(pos, "jgw_int", "PyObject_IsTrue", "i32", "fallback") + [
                f"  %f{pos} = icmp ne i32 %v{pos}, 0", f"  %t{pos} = zext i1 %f{pos} to i64"]
    call = "ptr %a1, ptr %a3, ptr %a6, double %v0, i64 %t2, i64 %t4, double %v5"
    return "\n".join([
        f"@jgp_fallback_{name} = global ptr null, align 8",
        f"define ptr @jgp_{name}(ptr %self, ptr %args, i64 %nargs) {{",
        "entry:",
        "  %cnt = icmp eq i64 %nargs, 7",
        "  br i1 %cnt, label %start, label %fallback",
        "start:", *unbox,
        f"  %st32 = call i32 @jgp_{name}_f32({call})",
        "  %mis = icmp eq i32 %st32, 1",
        "  br i1 %mis, label %wide, label %settled",
        "wide:",
        f"  %st64 = call i32 @jgp_{name}_f64({call})",
        "  br label %settled",
        "settled:",                     # (%k5: the block of the last unboxing, above)
        "  %st = phi i32 [%st32, %k5], [%st64, %wide]",
        "  %ok = icmp eq i32 %st, 0",
        "  br i1 %ok, label %good, label %fallback",
        "good:",
        "  call void @Py_IncRef(ptr @_Py_NoneStruct)",
        "  ret ptr @_Py_NoneStruct",
        "fallback:",
        f"  %fb = load ptr, ptr @jgp_fallback_{name}",
        "  %r = call ptr @PyObject_Vectorcall(ptr %fb, ptr %args, i64 %nargs, ptr null)",
        "  ret ptr %r",
        "}", ""])


_DECLARATIONS = """declare ptr @PyObject_Vectorcall(ptr, ptr, i64, ptr)
declare i32 @PyObject_IsTrue(ptr)
"""
_PARALLEL_DECLARATIONS = """declare void @numba_parallel_for(ptr, ptr, ptr, ptr, ptr, i64, i64, i64)
declare i64 @get_num_threads()
declare ptr @PyMem_RawMalloc(i64)
declare void @PyMem_RawFree(ptr)
"""
#: what a program whose products are not split calls (no threading layer needed)
SERIAL = ("blas_gemm",)


def module_ir(parallel: bool = True) -> str:
    """The LLVM IR of the functions here (with ``native.IR_GLOBALS``): all of them, or
    (``parallel`` False) those of ``SERIAL``, which need no threading layer."""
    names = list(NAMES) if parallel else list(SERIAL)
    parts = [native.IR_GLOBALS, _DECLARATIONS] + [_PARALLEL_DECLARATIONS] * parallel
    for t, real, dtype, gemm in _TYPES:
        parts += [f"declare void @{gemm}(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, "
                  "ptr, ptr, ptr)", _tile_ir(t, real, gemm)]
        parts += [_workers_ir(t, real)] * parallel
        parts += [_function_ir(name, t, real, dtype) for name in names]
    parts += [_entry_ir(name) for name in names]
    return "\n".join(parts)


def _refusal(name: str, a, ta, b, tb, c) -> Exception | None:
    """Why these are not a product's operands (None: they are), as the exception to raise:
    C-contiguous float32 or float64 arrays of one dtype and of 2 dimensions (3 for a batch),
    whose shapes multiply."""
    nd = 3 if NAMES[name] else 2
    arrays = (a, b, c)
    if not all(isinstance(x, np.ndarray) and x.ndim == nd and x.flags.c_contiguous
               for x in arrays) or c.dtype not in (np.float32, np.float64) \
            or a.dtype != c.dtype or b.dtype != c.dtype:
        got = ", ".join(f"{x.dtype}{list(x.shape)}" if isinstance(x, np.ndarray) else
                        type(x).__name__ for x in arrays)
        return TypeError(f"{name}: expected C-contiguous float32 or float64 arrays of one "
                         f"dtype and {nd} dimensions; got {got}")
    if not c.flags.writeable:
        return ValueError(f"{name}: the output array is read-only")
    op_a = a.shape[:-2] + (a.shape[::-1][:2] if ta else a.shape[-2:])
    op_b = b.shape[:-2] + (b.shape[::-1][:2] if tb else b.shape[-2:])
    if op_a[:-2] != c.shape[:-2] or op_b[:-2] != c.shape[:-2] or op_a[-2] != c.shape[-2] \
            or op_b[-1] != c.shape[-1] or op_a[-1] != op_b[-2]:
        return ValueError(f"{name}: op(a) {op_a} @ op(b) {op_b} does not give c's shape "
                          f"{c.shape}")
    return None


def _fallback(name: str) -> Callable:
    """What a built-in calls for arguments it does not take: a TypeError or ValueError where
    they are no product's operands (the Numba function would fail to type them, or read past
    them, or write a read-only output), else the Numba function of ``kernels/matmul.py`` (an
    unaligned array, NumPy scalars, bools as flags; its own error for oversized products)."""
    def call(alpha, a, ta, b, tb, beta, c):
        why = _refusal(name, a, ta, b, tb, c)
        if why is not None:
            raise why
        from ..kernels import matmul  # type: ignore[attr-defined]
        return getattr(matmul, name)(alpha, a, ta, b, tb, beta, c)
    call.__name__ = call.__qualname__ = f"{name}_fallback"
    return call


def available(parallel: bool = True) -> bool:
    """Whether this process can have the built-ins: what ``threaded``'s launchers need (Linux,
    Numba internals checked, NumPy's array struct as expected), and for the split products,
    threads allowed."""
    return threaded.available() and not (parallel and numba_patches.serial_kernels())


def functions(parallel: bool = True) -> dict[str, Callable] | None:
    """The built-in functions by name, built once per process: all of them, or (``parallel``
    False) those of ``SERIAL`` alone unless all are built already, so that a program whose
    products are not split does not start the threading layer (a process forked after
    OpenMP's threads started runs serial kernels). None where they cannot be built here, or
    ``JITGRAPH_LOOP_IR=0`` gives every kernel and product to Numba (then drivers call
    ``kernels/matmul.py``'s Numba functions)."""
    if os.environ.get("JITGRAPH_LOOP_IR", "1") == "0":
        return None
    with _LOCK:
        key = "gemm_launchers" if parallel or STATE.patches.get("gemm_launchers") else \
            "gemm_launchers_serial"
        if key not in STATE.patches:
            STATE.patches[key] = _build(parallel) if available(parallel) else None
        return STATE.patches[key]


def built(name: str) -> Callable | None:
    """The built-in ``name`` where this process has built it (else None; builds nothing)."""
    for key in ("gemm_launchers", "gemm_launchers_serial"):
        fn = (STATE.patches.get(key) or {}).get(name)
        if fn is not None:
            return fn
    return None


def _build(parallel: bool) -> dict[str, Callable] | None:
    import llvmlite.binding as llvm

    from ..kernels import blas  # type: ignore[attr-defined]
    try:
        native.register_runtime()
        if parallel and not native.parallel_symbols():
            return None
        blas.register()
    except Exception:
        return None
    return _compile(llvm, parallel)


def _compile(llvm, parallel: bool) -> dict[str, Callable] | None:
    text = module_ir(parallel)
    lock = _compiler_lock()
    with lock:                      # LLVM's context is not thread-safe
        mod = llvm.parse_assembly(text)
        mod.triple = llvm.get_process_triple()
        mod.verify()
        # (glue around BLAS calls: code generation without optimisation, 15 ms against 55)
        engine = llvm.create_mcjit_compiler(mod, native.target_machine(opt=0))
        engine.finalize_object()
    STATE.patches.setdefault("engines", []).append(engine)
    addr = engine.get_global_value_address
    for gname, obj in (("jgw_ndarray", np.ndarray), ("jgw_float", float), ("jgw_int", int)):
        ctypes.c_void_p.from_address(addr(gname)).value = id(obj)
    keep: list = [engine]
    out = {}
    for name in (NAMES if parallel else SERIAL):
        fallback = _fallback(name)
        keep.append(fallback)
        ctypes.c_void_p.from_address(addr(f"jgp_fallback_{name}")).value = id(fallback)
        fn = native.builtin(name, engine.get_function_address(f"jgp_{name}"), keep)
        if fn is None:
            return None
        out[name] = fn
    STATE.patches.setdefault("gemm_launcher_keep", []).append(keep)
    return out


def _compiler_lock():
    """Numba's compiler lock where Numba is imported (its LLVM context is this one), else a
    lock of our own."""
    import sys
    if "numba" in sys.modules:
        from numba.core.compiler_lock import global_compiler_lock
        return global_compiler_lock
    return _LLVM_LOCK


_LLVM_LOCK = threading.RLock()
