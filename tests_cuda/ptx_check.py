"""Compile every generated CUDA kernel of a set of programs to PTX for a real GPU target
(default sm_90) and assemble it with ``ptxas``, without a GPU: Numba's simulator does no type
checking, so this is what catches generated code the CUDA target would reject, and what the
hardware would run badly.

Checks, per kernel (each distinct kernel is compiled once):

* it compiles to PTX (libNVVM) and assembles (``ptxas -arch=sm_XY -v``), as libNVVM wrote it;
* its PTX ``.version`` is one the oldest driver the ``cuda`` extra supports accepts
  (``OLDEST_DRIVER``: CUDA 13.0, PTX ISA 9.0): a newer libNVVM (13.5 writes PTX 9.5) makes
  kernels that such a driver loads only because nvJitLink links them first, which is
  reported rather than hidden by rewriting the version;
* no register spills: ptxas reports ``0 bytes spill stores, 0 bytes spill loads``;
* single precision stays single precision: a kernel whose arrays and computed values (the
  graph values of its step, not weak Python scalars) are float32 beside integer and bool
  ones only has no float64 instruction. *Float64 instruction*: a PTX instruction (not a
  directive, label or comment) whose opcode names the ``f64`` type (``add.f64``,
  ``fma.rn.f64``, ``setp.lt.f64``, ``selp.f64``, ``mov.f64``, ``cvt.f64.f32``,
  ``cvt.rn.f32.f64``, ``cvt.rzi.s64.f64`` ...) or that reads or writes a float64 register
  (``%fd<n>``: ``mov.b64 {%r1, %r2}, %fd3`` splitting a double). A ``.reg .f64`` declaration
  alone is not counted (NVVM declares only registers it uses, so a used one shows up as an
  instruction too), nor is libdevice's float64 step in the huge-argument reduction of
  ``sinf``/``cosf``/``tanf`` (see ``_LIBDEVICE_F64``). Exempt, as they compute in float64 by
  NumPy's rules: kernels with a float64 array or value (``f32 * i32``, ``f32 ** int64``,
  ``astype``), and integer-only kernels (integer ``power`` is computed in float64, rounded);
* the scalar helpers of ``kernels/cuda_scalar.py``, compiled alone per dtype in a kernel
  without loops: float32 ones have no float64 instruction, and floor, sign, logistic_f32,
  maximum and minimum have no branch at all (``bra``, ``@%p bra``); the others keep
  libdevice's own slow paths;
* ``fastmath=True`` kernels use the approximate instructions (``tanh.approx.f32``; ``__expf``:
  one ``ex2.approx`` without the range reduction of precise ``expf``, whose mark is its
  round-down ``fma.rm``; note that precise ``expf`` ends in ``ex2.approx`` too), and default
  kernels do not.

Needs numba-cuda with libNVVM (``pip install 'numba-cuda[cu13]'``) and ``ptxas`` (the CUDA
toolkit on PATH, or ``pip install nvidia-cuda-nvcc``); without them it prints why and exits 0.
Must run without NUMBA_ENABLE_CUDASIM (the test runs it in a subprocess). Records are cached
on disk (``JITGRAPH_PTX_CHECK_CACHE=0`` or ``--no-cache``: compile everything again).

    python tests_cuda/ptx_check.py [--cc 9.0] [-k NAME] [--subset | --all] [--json OUT]

``--subset``: the representative selection the pytest run uses (the benchmarks' programs, a
few cases, the helpers); default: the benchmarks' programs, the CUDA test selection, the
device tests' programs, split / column layouts, index maps at training sizes and the library
kernels; ``--all``: every case of the shared table (forward, and gradient where defined)
instead of the CUDA test selection. Prints one line per program, exit 1 on any problem.
"""
from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(_ROOT, "tests"), os.path.join(_ROOT, "tests_cuda"), _ROOT]

import numpy as np  # noqa: E402

INSTALL = ("install numba-cuda with libNVVM (pip install 'numba-cuda[cu13]') and ptxas (the CUDA "
           "toolkit on PATH, or pip install nvidia-cuda-nvcc)")


def _no_driver_device_functions(cc) -> None:
    """Device functions compile for the *current* device's capability; without a driver,
    pretend there is one of capability ``cc`` (kernels themselves take ``cc`` directly)."""
    import types as pytypes

    from numba.cuda import dispatcher
    dev = pytypes.SimpleNamespace(compute_capability=cc)
    dispatcher.get_current_device = lambda: dev


def ptxas_path() -> str | None:
    """``ptxas`` on PATH, else the one of the ``nvidia-cuda-nvcc`` wheel."""
    found = shutil.which("ptxas")
    if found is None:
        try:
            import nvidia
            dirs = list(nvidia.__path__)
        except ImportError:
            dirs = []
        for base in dirs:
            for sub in ("cu13", "cuda_nvcc", "cu12"):
                cand = os.path.join(base, sub, "bin", "ptxas")
                if os.access(cand, os.X_OK):
                    return cand
    return found


def missing_tools(cc=(9, 0)) -> str | None:
    """Why the check cannot run here (None: it can)."""
    if ptxas_path() is None:
        return f"ptxas not found: {INSTALL}"
    try:
        from numba import cuda, float32

        def probe(a):
            a[0] = 1.0
        cuda.compile_ptx(probe, (float32[::1],), cc=cc)
    except Exception as e:      # no libNVVM (or no numba-cuda)
        return f"cannot compile PTX ({type(e).__name__}: {e}): {INSTALL}"
    return None


# ------------------------------------------------------------------ PTX analysis
_OPCODE = re.compile(r"^(?:@!?%\w+\s+)?([a-z][\w.]*)")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_VERSION = re.compile(r"Unsupported \.version \S+; current version is '([\d.]+)'")
_PTX_VERSION = re.compile(r"^\.version (\d+)\.(\d+)", re.M)
#: the oldest CUDA driver the ``cuda`` extra (the cu13 wheels) supports, and the newest PTX ISA
#: version it compiles: a driver JIT-compiles PTX up to its own CUDA version's ISA
OLDEST_DRIVER = (13, 0)
PTX_ISA = {(12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4),
           (12, 5): (8, 5), (12, 6): (8, 5), (12, 8): (8, 7), (12, 9): (8, 8), (13, 0): (9, 0)}


def ptx_version(ptx: str) -> tuple[int, int]:
    """The ``.version`` directive of a PTX module."""
    m = _PTX_VERSION.search(ptx)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def instructions(ptx: str) -> list[str]:
    """The instruction lines of a PTX module's function bodies (no directives, labels,
    braces or comments)."""
    out = []
    for line in ptx.splitlines():
        s = line.split("//", 1)[0].strip()
        if not s or s[0] in ".{}$" or s.endswith(":") or s.startswith("@@"):
            continue
        if _OPCODE.match(s):
            out.append(s)
    return out


# libdevice's sinf/cosf/tanf reduce huge arguments (Payne-Hanek) with one float64 product by
# pi/2 * 2^-64: ``cvt.rn.f64.s64 %fdA, ..; mul.f64 %fdB, %fdA, 0d3BF921FB54442D19; cvt.rn.f32.f64
# .., %fdB``, on a path taken only for |x| > 105615. Not ours to change: not counted.
_LIBDEVICE_F64 = re.compile(r"mul\.f64\s+(%fd\d+),\s*(%fd\d+),\s*0d3BF921FB54442D19")


def float64_instructions(ptx: str) -> list[str]:
    """Instructions that compute, convert or move float64 values (see the module docstring),
    less libdevice's trigonometric argument reduction."""
    exempt = {r for m in _LIBDEVICE_F64.finditer(ptx) for r in m.groups()}
    out = []
    for s in instructions(ptx):
        op = _OPCODE.match(s).group(1)
        regs = set(re.findall(r"%fd\d+", s))
        if regs and regs <= exempt and (op.startswith("cvt.") or op.startswith("mul.f64")):
            continue
        if "f64" in op.split(".") or regs:
            out.append(s)
    return out


def branches(ptx: str) -> list[str]:
    """Branch instructions (``bra``, ``@%p bra``, ``bra.uni``)."""
    return [s for s in instructions(ptx) if _OPCODE.match(s).group(1).split(".")[0] == "bra"]


def ptxas(ptx: str, cc=(9, 0)) -> dict:
    """Assemble ``ptx`` for ``sm_XY`` with ``ptxas -v``: registers (most of any entry),
    stack frame and spill bytes (summed over the module's functions)."""
    arch = f"sm_{cc[0]}{cc[1]}"
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas_path(), f"-arch={arch}", "-v", src, "-o",
                            os.path.join(d, "k.cubin")], capture_output=True, text=True)
        text = r.stdout + r.stderr
    if r.returncode != 0:
        m = _VERSION.search(text)
        why = (f"libNVVM wrote PTX {'.'.join(map(str, ptx_version(ptx)))}, newer than this "
               f"ptxas reads ({m.group(1)}): use the ptxas of the same CUDA release as libNVVM "
               "(pip install nvidia-cuda-nvcc of that version)\n") if m else ""
        raise RuntimeError(f"ptxas -arch={arch} failed: {why}{text}")
    spills = [tuple(map(int, m)) for m in _SPILLS.findall(text)]
    regs = [int(m) for m in _REGS.findall(text)]
    return {"registers": max(regs, default=0), "stack": sum(s[0] for s in spills),
            "spill_stores": sum(s[1] for s in spills), "spill_loads": sum(s[2] for s in spills)}


def _single_precision(dtypes) -> bool:
    """float32 beside integer and bool types only."""
    dts = [np.dtype(d) for d in dtypes]
    return any(d == np.float32 for d in dts) and not any(
        d.kind in "fc" and d.itemsize > 4 for d in dts)


def analyse(name: str, ptx: str, dtypes, cc, fastmath: bool, values=()) -> dict:
    """One kernel's record: ptxas resources, float64 instructions and whether the
    single-precision rule applies (``dtypes``: its arrays'; ``values``: the dtypes of the
    graph values it computes)."""
    f64 = float64_instructions(ptx)
    ops = {_OPCODE.match(s).group(1) for s in instructions(ptx)}
    return {"kernel": name, "dtypes": [np.dtype(d).name for d in dtypes], "fastmath": fastmath,
            **ptxas(ptx, cc), "ptx_version": list(ptx_version(ptx)), "values": sorted({np.dtype(d).name for d in values}),
            "single_precision": _single_precision(list(dtypes) + list(values)),
            "f64_count": len(f64), "f64_sample": f64[:6],
            "tanh_approx": "tanh.approx.f32" in ops,
            "precise_exp": any(o.startswith("fma.rm") for o in ops),
            "branches": len(branches(ptx))}


# ------------------------------------------------------------------ record cache
# Compiling is the slow part (seconds per reduction kernel), so records are kept on disk,
# content-addressed: the kernel's source (without its module hash), signature, target and
# fastmath, and the versions of everything that shapes the PTX or its reading (numba-cuda,
# libNVVM, ptxas, the scalar helpers via jitgraph's code fingerprint, this file).
CACHE = {"enabled": os.environ.get("JITGRAPH_PTX_CHECK_CACHE", "1") != "0"}


def _tool_versions() -> str:
    if "versions" not in CACHE:
        from importlib import metadata

        from jitgraph.compiler.settings import fingerprint
        parts = [fingerprint()]
        for dist in ("numba-cuda", "numba", "nvidia-nvvm", "llvmlite"):
            try:
                parts.append(f"{dist}={metadata.version(dist)}")
            except metadata.PackageNotFoundError:
                parts.append(f"{dist}=?")
        r = subprocess.run([ptxas_path(), "--version"], capture_output=True, text=True)
        parts.append(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "ptxas=?")
        with open(os.path.abspath(__file__), "rb") as f:
            parts.append(hashlib.sha256(f.read()).hexdigest())
        CACHE["versions"] = "|".join(parts)
    return CACHE["versions"]


def _cache_file(key) -> str | None:
    if not CACHE["enabled"]:
        return None
    from jitgraph.compiler.settings import disk_cache
    h = hashlib.sha256(repr((key, _tool_versions())).encode()).hexdigest()[:32]
    return os.path.join(str(disk_cache().directory), "ptx-check", h + ".json")


def cached(key, make):
    """``make()`` (a JSON-able record), or its earlier result for the same ``key``."""
    path = _cache_file(key)
    if path is not None and os.path.exists(path):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    rec = make()
    if path is not None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(rec, f)
            os.replace(tmp, path)
        except OSError:
            pass
    return rec


# ------------------------------------------------------------------ generated kernels
_PTX_CACHE: dict = {}      # distinct kernel (source without its module hash, signature) -> record


def _normalise(src: str) -> str:
    return re.sub(r"_[0-9a-f]{12}\b", "_H", src)


class _TargetWithoutDriver:
    """The CUDA target as the pipeline uses it, minus the check that a driver is there (this
    check runs without a GPU): the same context and code generator, warp shuffles on, as on
    a real GPU."""

    def __init__(self, target):
        self.target = target

    def __getattr__(self, name):
        return getattr(self.target, name)

    def context(self, options):
        from jitgraph.compiler.backends.cuda import CudaContext
        return CudaContext()

    def codegen(self, plan, ctx, options):
        from jitgraph.compiler.backends.cuda import CudaCodegen
        return CudaCodegen(plan, ctx, shuffle=True, fastmath=options.fastmath,
                           profile=options.profile)


def program_kernels(fn, args, cc=(9, 0), fastmath=False, **patch) -> list[dict]:
    """Generate the CUDA module of ``jit(fn, fastmath=...)(*args)``, compile each kernel to
    PTX and assemble it; returns one record per kernel (raises on the first failure). A kernel
    already compiled for another program is not compiled again."""
    from numba import cuda, from_dtype, types

    import jitgraph
    from jitgraph.compiler import pipeline
    from jitgraph.compiler.backends import cuda as codegen_cuda
    from jitgraph.compiler.backends.base import CompileOptions
    from jitgraph.compiler.backends.cuda_program import cache_key
    from jitgraph.compiler.settings import disk_cache, fingerprint

    old = {k: getattr(codegen_cuda, k) for k in patch}
    for k, v in patch.items():
        setattr(codegen_cuda, k, v)
    try:
        # the program jit(fn, device="cuda") compiles: the pipeline's own lowering (custom
        # calls inlined, the fused rewrites applied), fusion and code generation
        graph = jitgraph.make_graph(fn)(*args)
        gen = pipeline.generate_graph(graph, _TargetWithoutDriver(pipeline.target_of("cuda")),
                                      CompileOptions(fastmath=fastmath, name="ptx_check"))
        plan, module_text = gen.plan, gen.module
        source, info = module_text.source, module_text.info
    finally:
        for k, v in old.items():
            setattr(codegen_cuda, k, v)
    module, _ = disk_cache().load_module(source, key_extra=cache_key(
        fingerprint(), cc, fastmath, True) + "|ptx-check")
    from jitgraph.dtypes import storage     # (the kernels get a 16-bit float's bits)
    dtypes = {name: storage(v.aval.dtype) for v, name in plan._names.items()}
    dtypes.update({n: storage(d) for n, _, d in info.scratch_specs})
    # the dtypes of the values each step computes (not weak Python scalars): a float32 program
    # may compute in float64 where NumPy promotes (f32 * i32, f32 ** int64, astype)
    steps = {re.sub(r"_[0-9a-f]{12}$", "", ks.name): {
        v.aval.dtype for n in ks.ops for v in (*n.inputs, *n.outs)
        if hasattr(v, "aval") and not v.aval.weak} for ks in module_text.kernels}
    out = []
    for name, obj in vars(module).items():
        py = getattr(obj, "py_func", None)
        if py is None or getattr(py, "__module__", None) != module.__name__:
            continue
        fm = bool(getattr(obj, "targetoptions", {}).get("fastmath", False))
        dts = [np.dtype(dtypes[p]) for p in inspect.signature(py).parameters]
        src = inspect.getsource(py)
        base = re.sub(r"_[0-9a-f]{12}$", "", name)
        values = sorted({np.dtype(d).name for step, vs in steps.items()
                         if base.startswith(step + "_") for d in vs})
        key = (_normalise(src), tuple(d.name for d in dts), cc, fm, tuple(values))
        rec = _PTX_CACHE.get(key)
        if rec is None:
            def make(py=py, dts=dts, fm=fm, name=name, src=src, values=values):
                sig = tuple(types.Array(from_dtype(d), 1, "C") for d in dts)
                try:
                    ptx, _ = cuda.compile_ptx(py, sig, cc=cc, fastmath=fm)
                    return dict(analyse(name, ptx, dts, cc, fm, values), source=src)
                except Exception as e:
                    raise RuntimeError(f"{name}: {type(e).__name__}: {e}\n{src}") from None
            rec = _PTX_CACHE[key] = cached(key, make)
        out.append(dict(rec, kernel=name, repeat=rec["kernel"] != name))
    return out


def check_program(fn, args, cc=(9, 0), **patch) -> int:
    """The number of kernels of ``jit(fn)(*args)`` that compile to PTX (raises otherwise)."""
    return len(program_kernels(fn, args, cc, **patch))


def library_kernels(cc=(9, 0)) -> int:
    """The hand-written kernels in kernels/cuda_*.py."""
    from numba import cuda, float32, float64, int64, types

    from jitgraph.kernels import cuda_matmul, cuda_util
    n = 0
    for dt in (float32, float64, int64):
        arr = types.Array(dt, 1, "C")
        cuda.compile_ptx(cuda_util._fill.py_func, (arr, dt), cc=cc)
        cuda.compile_ptx(cuda_util._copy.py_func, (arr, arr), cc=cc)
        for tile in (cuda_matmul.GPU_TILE, cuda_matmul.SIM_TILE):
            k = cuda_matmul.tiled_kernel(str(dt), tile)
            i = types.int64
            cuda.compile_ptx(k.py_func, (arr, i, i, i, arr, i, i, i, arr, arr, dt, dt, i, i, i),
                             cc=cc)
        n += 2 + 2
    bits, f32, i = types.Array(types.uint16, 1, "C"), types.Array(float32, 1, "C"), types.int64
    for operands in ("bfloat16", "float16"):      # 16-bit operands, float32 accumulation
        for tile in (cuda_matmul.GPU_TILE, cuda_matmul.SIM_TILE):
            k = cuda_matmul.tiled_kernel("float32", tile, operands)
            cuda.compile_ptx(k.py_func, (bits, i, i, i, bits, i, i, i, f32, f32, float32,
                                         float32, i, i, i), cc=cc)
            n += 1
    return n + len(attention_kernels(cc))


def attention_kernels(cc=(9, 0), dtypes=("float32", "float64")) -> list[dict]:
    """Records (``analyse``) of the fused-attention kernels of kernels/cuda_attention.py, per
    float dtype: they are library kernels no generated program contains."""
    from numba import cuda, types

    from jitgraph.kernels import cuda_attention
    out = []
    for name in dtypes:
        dt = getattr(types, name)
        a3, a2 = types.Array(dt, 3, "C"), types.Array(dt, 2, "C")
        head = (a3, a3, a3, a3, types.Array(types.int64, 1, "C"), types.int64, types.boolean,
                dt, dt)
        fwd, row_dots, key_grads, query_grads = cuda_attention.kernels(name)
        for label, k, sig in (("forward", fwd, head + (a3, a2, a2)),
                              ("row_dots", row_dots, (a3, a3, a2)),
                              ("key_grads", key_grads, head + (a2, a2, a2, a3, a3, a3)),
                              ("query_grads", query_grads, head + (a2, a2, a2, a3, a3))):
            ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=cc)
            out.append(analyse(f"attention {label}({name})", ptx, [name], cc, False))
    return out


# (helper, argument dtypes, branch-free) of kernels/cuda_scalar.py: each is compiled alone, in a
# kernel ``out[0] = helper(a[0], ...)`` without loops or bounds checks, so any branch is the
# helper's. Not branch-free: libdevice's own slow paths (float64 exp's overflow range, powf's
# special cases, erff); ``math.exp``/``math.tanh`` are there as the reference for fastmath.
HELPERS = [("floor", ("float32",), True), ("floor", ("float64",), True),
           ("sign", ("float32",), True), ("sign", ("float64",), True),
           ("sign", ("int32",), True), ("sign", ("int64",), True),
           ("logistic_f32", ("float32",), True), ("logistic_f64", ("float64",), False),
           ("maximum", ("float32", "float32"), True), ("minimum", ("float32", "float32"), True),
           ("maximum", ("float64", "float64"), True), ("power", ("float32", "float32"), False),
           ("erf", ("float32",), False), ("math.exp", ("float32",), False),
           ("math.exp", ("float64",), False), ("math.tanh", ("float32",), False)]
FASTMATH_HELPERS = {"logistic_f32", "power", "math.exp", "math.tanh"}   # also with fastmath


def helper_kernels(cc=(9, 0)) -> list[dict]:
    """Records of the scalar helpers compiled alone (default and fastmath)."""
    import math

    from numba import cuda, from_dtype, types

    from jitgraph.kernels import cuda_scalar
    out = []
    for name, dts, branch_free in HELPERS:
        params = [f"a{i}" for i in range(len(dts))]
        ns: dict = {}
        exec(f"def k(out, {', '.join(params)}):\n"
             f"    out[0] = {name}({', '.join(p + '[0]' for p in params)})\n",
             {"math": math, **vars(cuda_scalar)}, ns)
        res = np.result_type(*dts) if name != "sign" else np.dtype(dts[0])
        sig = tuple(types.Array(from_dtype(np.dtype(d)), 1, "C") for d in (res, *dts))
        for fm in (False, True) if name in FASTMATH_HELPERS and "float32" in dts else (False,):
            def make(fm=fm, k=ns["k"], sig=sig, res=res, dts=dts, name=name):
                ptx, _ = cuda.compile_ptx(k, sig, cc=cc, fastmath=fm)
                return analyse(f"{name}({', '.join(dts)})", ptx, (res, *dts), cc, fm)
            rec = cached(("helper", name, dts, cc, fm), make)
            out.append(dict(rec, helper=name, branch_free=branch_free))
    return out


def helper_problems(h: dict) -> list[str]:
    out = problems(h)
    if h["branch_free"] and h["branches"]:
        out.append(f"{h['branches']} branches")
    return out


# ------------------------------------------------------------------ programs
# the representative selection the pytest run compiles (every step kind and scalar helper,
# float32 and float64); the CLI's default and --all compile more
SUBSET = ["tanh[f32_2x3]", "sign[f64_2x3]", "floor[f32_2x3]", "sigmoid[f32_2x3]", "power[f32]",
          "clip[f32]", "log_softmax[f32]", "composite[layernorm f32]", "new unary[f32]"]
SUBSET_GRADS = ["tanh[f32_2x3]"]


def _big(shape, dtype):
    """An array of that shape and dtype costing no memory (tracing needs only the aval)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def bench_programs():
    """The GPU benchmarks' programs (bench/gpu_bench.py) at their sizes: (name, fn, args,
    patch, fastmath)."""
    import jitgraph
    import jitgraph.numpy as jnp
    from jitgraph import nn

    def elementwise(v):
        return jnp.sum(jnp.tanh(v) * nn.sigmoid(1.5 * v + 0.1) + 0.5 * v ** 2)
    x = _big(2 ** 26, np.float32)
    yield "bench elementwise value+grad 2^26", jitgraph.value_and_grad(elementwise), (x,), {}, \
        False
    yield "bench elementwise value+grad 2^26 fastmath", jitgraph.value_and_grad(elementwise), \
        (x,), {}, True

    def xent(z, labels):
        return -jnp.mean(jnp.take_along_axis(nn.log_softmax(z, axis=-1), labels[:, None],
                                             axis=1))
    yield "bench softmax-xent fwd+bwd (8192, 32000)", jitgraph.value_and_grad(xent), \
        (_big((8192, 32000), np.float32), _big(8192, np.int64)), {}, False

    def step(ps, xx, yy):
        def loss(q):
            h = xx
            for i, (wt, bs) in enumerate(q):
                h = h @ wt + bs
                if i < len(q) - 1:
                    h = jnp.tanh(h)
            return -jnp.mean(jnp.sum(nn.log_softmax(h, axis=-1) * yy, axis=-1))
        lv, gs = jitgraph.value_and_grad(loss)(ps)
        return [(a - 0.1 * ga, b - 0.1 * gb) for (a, b), (ga, gb) in zip(ps, gs)], lv
    sizes, batch = [784, 512, 512, 10], 128
    params = [(_big((a, b), np.float32), _big(b, np.float32)) for a, b in zip(sizes, sizes[1:])]
    yield "bench MLP step 784-512-512-10 batch 128", step, \
        (params, _big((batch, 784), np.float32), _big((batch, 10), np.float32)), {}, False

    def ln(xx, w, b, ct):
        return jnp.sum(nn.layer_norm(xx, w, b) * ct)
    n, d = 8192, 1024
    yield "bench layernorm fwd+bwd (8192, 1024)", \
        jitgraph.value_and_grad(ln, argnums=(0, 1, 2)), \
        (_big((n, d), np.float32), _big(d, np.float32), _big(d, np.float32),
         _big((n, d), np.float32)), {}, False


def narrow_programs():
    """A training step in bfloat16 and in float16: the conversions of their loads and stores
    (``kernels/narrow.py``, integer and float32 operations) and the tiled product staging
    16-bit operands must type and assemble for the GPU too (the simulator checks no types)."""
    import ml_dtypes

    import jitgraph
    from test_cuda_narrow import _data, _mlp_loss
    for dt in (ml_dtypes.bfloat16, np.float16):
        yield f"{np.dtype(dt).name} mlp value+grad", jitgraph.value_and_grad(_mlp_loss), \
            _data(dt), {}, False


def programs(selection="default"):
    """(name, fn, args, codegen patches, fastmath). ``selection``: "subset" (the pytest run),
    "default" (the simulator test selection, the device MLP step, the split / column
    reduction layouts, index maps at training sizes) or "all" (every case of the table too);
    the benchmarks' programs in each."""
    import jitgraph
    import jitgraph.numpy as jnp
    from cases import CASES
    from test_cuda_cases import FORWARD, GRADS

    by = {c.name: c for c in CASES}
    forward, grads = {"subset": (SUBSET, SUBSET_GRADS), "default": (FORWARD, GRADS),
                      "all": ([c.name for c in CASES], [c.name for c in CASES])}[selection]
    yield from bench_programs()
    yield from narrow_programs()
    for name in forward:
        yield name, by[name].fn, by[name].args, {}, False
    for name in grads:
        c = by[name]
        if selection == "all":
            if _differentiable(c):      # the sum of the float outputs
                yield f"grad {name}", jitgraph.grad(lambda *a, c=c: _float_sum(c.fn(*a)),
                                                    argnums=c.argnums), c.args, {}, False
            continue
        out = np.asarray(c.fn(*c.args))
        w = np.ones(out.shape, out.dtype)
        yield f"grad {name}", jitgraph.grad(lambda *a, c=c, w=w: jnp.sum(c.fn(*a) * w),
                                            argnums=c.argnums), c.args, {}, False
    if selection == "subset":
        return      # the benchmarks' programs cover split, row and column reductions
    f = (lambda v: jnp.sum(jnp.tanh(v) * jitgraph.nn.sigmoid(1.5 * v + 0.1) + 0.5 * v ** 2))
    yield "split value+grad", jitgraph.value_and_grad(f), (np.ones(300, np.float32),), \
        {"SPLIT_MIN_INNER": 64, "SPLIT_CHUNK": 48}, False
    yield "columns", (lambda x, b: jnp.sum(jnp.tanh(x + b), axis=0) * 2.0 + b), \
        (np.ones((5, 40)), np.ones(40)), {}, False
    from test_cuda_runtime import _sgd
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((5, 6)).astype(np.float32), np.zeros(6, np.float32)),
              (rng.standard_normal((6, 3)).astype(np.float32), np.zeros(3, np.float32))]
    yield "mlp step", _sgd, (params, np.ones((4, 5), np.float32),
                             np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]), {}, False
    yield "argmax rows", (lambda x: (jnp.argmax(x, axis=-1), jnp.max(x, axis=-1))), \
        (np.ones((4, 100), np.float32),), {}, False
    # index maps at training sizes (the programs that failed to type past the CPU's parallel
    # threshold), value and gradient: offsets, clamps and thread indices in one integer type
    n = 1 << 17
    a, idx = rng.standard_normal(n).astype(np.float32), rng.integers(-n, n, n)

    def maps(a, i):
        c = jnp.concatenate([a, a[::-1] * 2.0])
        return jnp.pad(c, (3, 5)) + 1.0, jnp.roll(a, 7) * a[i], \
            jitgraph.nn.dropout(jitgraph.random.key(0), a, 0.3)
    yield "index maps 2^17", maps, (a, idx), {}, False
    yield "grad index maps 2^17", jitgraph.grad(
        lambda a, i: sum(jnp.sum(o) for o in maps(a, i))), (a, idx), {}, False


def _float_sum(out):
    import jitgraph.numpy as jnp
    from jitgraph.core import aval_of
    from jitgraph.tree import tree_flatten
    leaves = [x for x in tree_flatten(out)[0] if np.dtype(aval_of(x).dtype).kind == "f"]
    return sum(jnp.sum(x) for x in leaves)


def _differentiable(case) -> bool:
    """Whether the case is differentiated (its ``grad`` flag), to float outputs."""
    if not case.grad:
        return False
    try:
        from jitgraph.tree import tree_flatten
        return any(np.asarray(x).dtype.kind == "f" for x in tree_flatten(case.fn(*case.args))[0])
    except Exception:
        return False


# ------------------------------------------------------------------ the check
def problems(rec: dict) -> list[str]:
    """What is wrong with one kernel record (empty: clean)."""
    out = []
    oldest = PTX_ISA[OLDEST_DRIVER]
    version = tuple(rec.get("ptx_version", (0, 0)))
    if version > oldest:
        out.append(f"PTX {version[0]}.{version[1]} is newer than a CUDA "
                   f"{OLDEST_DRIVER[0]}.{OLDEST_DRIVER[1]} driver compiles "
                   f"({oldest[0]}.{oldest[1]}): the kernel loads there only because nvJitLink "
                   "links it first; use a libNVVM no newer than the oldest driver supported")
    if rec["spill_stores"] or rec["spill_loads"]:
        out.append(f"spills ({rec['spill_stores']} bytes stores, {rec['spill_loads']} bytes "
                   f"loads, {rec['registers']} registers)")
    if rec["single_precision"] and rec["f64_count"]:
        out.append(f"{rec['f64_count']} float64 instructions in a kernel of "
                   f"{'/'.join(sorted(set(rec['dtypes']) | set(rec.get('values', ()))))} "
                   f"values: {rec['f64_sample']}")
    return out


def run(selection="default", cc=(9, 0), k="", log=print, library=True) -> dict:
    """Compile and audit every kernel of the selection; returns {"programs": [...],
    "helpers": [...], "library": n}. A program that fails to generate or compile gets an
    ``error``."""
    import time
    t0 = time.perf_counter()
    _no_driver_device_functions(cc)
    result = {"cc": list(cc), "programs": [],
              "library": library_kernels(cc) if library else 0}
    t1 = time.perf_counter()
    result["helpers"] = helper_kernels(cc)
    log(f"library kernels: {result['library']} compiled ({t1 - t0:.1f} s); "
        f"{len(result['helpers'])} helper kernels ({time.perf_counter() - t1:.1f} s)")
    for h in result["helpers"]:
        bad = helper_problems(h)
        if bad:
            log(f"helper {h['kernel']}{' fastmath' if h['fastmath'] else ''}: {'; '.join(bad)}")
    for name, fn, args, patch, fastmath in programs(selection):
        if k not in name:
            continue
        entry = {"name": name, "fastmath": fastmath}
        t0 = time.perf_counter()
        try:
            entry["kernels"] = program_kernels(fn, args, cc, fastmath, **patch)
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            log(f"{name}: FAILED {entry['error']}")
        else:
            ks = entry["kernels"]
            bad = [f"{r['kernel']}: {p}" for r in ks for p in problems(r)]
            regs = max((r["registers"] for r in ks), default=0)
            dt = time.perf_counter() - t0
            log(f"{name}: {len(ks)} kernels, max {regs} registers ({dt:.1f} s)"
                + ("" if not bad else "; " + "; ".join(bad)))
        result["programs"].append(entry)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", default="9.0")
    ap.add_argument("-k", default="", help="only programs whose name contains this")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--subset", action="store_true", help="the pytest run's selection")
    g.add_argument("--all", action="store_true", help="every case of the shared table too")
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--no-cache", action="store_true", help="compile everything again")
    a = ap.parse_args()
    cc = tuple(int(x) for x in a.cc.split("."))
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        print("ptx_check: unset NUMBA_ENABLE_CUDASIM (the simulator compiles nothing)")
        return 2
    why = missing_tools(cc)
    if why is not None:
        print(f"ptx_check: skipped: {why}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"skip": why}, f)
        return 0
    selection = "subset" if a.subset else ("all" if a.all else "default")
    CACHE["enabled"] = CACHE["enabled"] and not a.no_cache
    result = run(selection, cc, a.k, library=selection != "subset")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)
    failures = sum(1 for p in result["programs"]
                   if "error" in p or any(problems(r) for r in p["kernels"]))
    helpers = sum(1 for h in result["helpers"] if helper_problems(h))
    print(f"{len(result['programs'])} programs, {len(_PTX_CACHE)} distinct kernels; "
          f"{failures} programs and {helpers} helpers with problems")
    return 1 if failures or helpers else 0


if __name__ == "__main__":
    sys.exit(main())
