"""BLAS for compiled kernels, bound by symbol name without importing ``scipy.linalg``.

Compiled code calls ``jitgraph_sgemm64`` and ``jitgraph_dgemm64``: Fortran ``?gemm`` with 64-bit
integers. :func:`register` (at the import of this module, and before a native bundle links)
points those names at

* the OpenBLAS NumPy's wheels bundle (``scipy_sgemm_64_``, 64-bit integers) where NumPy has one:
  products then share NumPy's BLAS threads, instead of a second pool whose threads spin beside
  NumPy's after every call (on 2 cores, a program mixing ``np.matmul`` and compiled steps lost up
  to 2x to that), and it is the newer build (1-7 % faster here on the MLP products);
* otherwise SciPy's ``scipy.linalg.cython_blas`` (32-bit integers), through a five-instruction
  shim compiled here with llvmlite that narrows the integers (``kernels/matmul.py`` refuses
  sizes over 2**31 - 1 before any call).

Either way the machine code of a compiled product is the same, so code cached on disk links in
any process. Why not Numba's own binding (``numba_xxgemm``, what ``np.dot`` compiles to): it
imports the whole ``scipy.linalg`` package at the first product of every process, about 0.3 s
of a cached program's start; ``cython_blas`` loads by itself in about 0.02 s.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import types

#: Fortran routines bound, and the LLVM symbol each one is registered under (64-bit integers).
ROUTINES = {"sgemm": "jitgraph_sgemm64", "dgemm": "jitgraph_dgemm64"}
_MODULE = "scipy.linalg.cython_blas"
_NUMPY_PREFIX, _NUMPY_SUFFIX = "scipy_", "_64_"    # symbol names in NumPy's ILP64 OpenBLAS


def _load_cython_blas() -> types.ModuleType:
    """SciPy's ``cython_blas`` extension, without executing ``scipy/linalg/__init__.py``."""
    if _MODULE in sys.modules:
        return sys.modules[_MODULE]
    spec = importlib.util.find_spec("scipy.linalg")  # imports the light ``scipy`` package only
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "cython_blas" + suffix)
            if not os.path.exists(path):
                continue
            ext = importlib.util.spec_from_file_location(_MODULE, path)
            module = importlib.util.module_from_spec(ext)
            ext.loader.exec_module(module)
            # Cython put it in sys.modules; take it out again so that a later
            # ``import scipy.linalg`` runs normally (and gets this same module back).
            if sys.modules.get(_MODULE) is module and "scipy.linalg" not in sys.modules:
                del sys.modules[_MODULE]
            return module
    import scipy.linalg.cython_blas as module  # an unusual layout: the slow, standard way
    return module


def _capsule_pointer(capsule: object) -> int:
    """The pointer in a PyCapsule (private prototypes: ``ctypes.pythonapi``'s shared function
    objects keep whatever argtypes other code gave them)."""
    api = ctypes.pythonapi
    name_of = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", api))
    pointer_of = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", api))
    return pointer_of(capsule, name_of(capsule))


_REGISTERED: dict[str, int] = {}
_SOURCE: list[str] = []     # which library the symbols point at
_KEEP: list = []            # the shims' execution engine (their code lives as long as it)


def _numpy_library_paths() -> list[str]:
    """Where NumPy's wheels keep their bundled OpenBLAS (Linux, macOS, Windows layouts)."""
    import glob

    import numpy
    root = os.path.dirname(os.path.abspath(numpy.__file__))
    pattern = "*scipy_openblas64_*"
    return sorted(glob.glob(os.path.join(os.path.dirname(root), "numpy.libs", pattern))
                  + glob.glob(os.path.join(root, ".dylibs", pattern)))


def _numpy_blas() -> dict[str, int] | None:
    """routine -> address in NumPy's bundled ILP64 OpenBLAS, or None where NumPy has none."""
    for path in _numpy_library_paths():
        try:
            lib = ctypes.CDLL(path)     # NumPy loaded it already: the same handle
            return {r: ctypes.cast(getattr(lib, _NUMPY_PREFIX + r + _NUMPY_SUFFIX),
                                   ctypes.c_void_p).value for r in ROUTINES}
        except (OSError, AttributeError):
            continue
    return None


def _lp64_shims(targets: dict[str, int]) -> dict[str, int]:
    """routine -> address of a function taking 64-bit integers that narrows them and calls
    ``targets[routine]`` (a Fortran ``?gemm`` with 32-bit integers)."""
    import llvmlite.binding as llvm
    from llvmlite import ir

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module(name="jitgraph_blas_shims")
    i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
    for routine, address in targets.items():
        real = ir.FloatType() if routine == "sgemm" else ir.DoubleType()
        fp = real.as_pointer()

        def fnty(int_t):
            ip = int_t.as_pointer()
            return ir.FunctionType(ir.VoidType(), [i8p, i8p, ip, ip, ip, fp, fp, ip, fp, ip,
                                                   fp, fp, ip])
        fn = ir.Function(module, fnty(i64), name=f"shim_{routine}")
        b = ir.IRBuilder(fn.append_basic_block())
        args = list(fn.args)
        for j in (2, 3, 4, 7, 9, 12):            # m, n, k, lda, ldb, ldc
            narrow = b.alloca(i32)
            b.store(b.trunc(b.load(args[j]), i32), narrow)
            args[j] = narrow
        target = b.inttoptr(ir.Constant(i64, address), fnty(i32).as_pointer())
        b.call(target, args)
        b.ret_void()
    target_machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), target_machine)
    engine.finalize_object()
    _KEEP.append(engine)
    return {r: engine.get_function_address(f"shim_{r}") for r in targets}


def register() -> dict[str, int]:
    """Register the BLAS routines with LLVM (once per process); returns symbol -> address."""
    if not _REGISTERED:
        import llvmlite.binding as llvm

        addresses = None if os.environ.get("JITGRAPH_BLAS") == "scipy" else _numpy_blas()
        _SOURCE.append("numpy" if addresses else "scipy")
        if addresses is None:
            capi = _load_cython_blas().__pyx_capi__
            addresses = _lp64_shims({r: _capsule_pointer(capi[r]) for r in ROUTINES})
        for routine, symbol in ROUTINES.items():
            llvm.add_symbol(symbol, addresses[routine])
            _REGISTERED[symbol] = addresses[routine]
        from .blas_spin import shorten_idle_spin
        shorten_idle_spin()     # idle BLAS workers sleep 0.4 ms after a product, not 0.1 s
    return dict(_REGISTERED)


def library() -> str:
    """Which BLAS compiled products call in this process: ``"numpy"`` (the OpenBLAS NumPy
    bundles) or ``"scipy"`` (SciPy's, through 32-bit shims; ``JITGRAPH_BLAS=scipy`` asks for
    it)."""
    register()
    return _SOURCE[0]


def light_numba_blas_check() -> None:
    """Make Numba's BLAS check cheap before this process's first compile.

    Why: the first compile loads Numba's lowering registries, and one of them
    (``numba.np.arraymath``) checks for BLAS with ``numba.np.linalg.ensure_blas``, which imports
    all of ``scipy.linalg`` (0.3 s).  The check is replaced by one that loads ``cython_blas`` as
    :func:`register` does.  Numba's own runtime binding (``np.dot`` compiled by Numba) still
    imports ``scipy.linalg`` where a program calls it.  No effect once the registries are loaded."""
    if "numba.np.arraymath" in sys.modules:
        return
    import numba.np.linalg as numba_linalg

    if getattr(numba_linalg.ensure_blas, "_jitgraph_light", False):
        return

    def ensure_blas() -> None:
        try:
            _load_cython_blas()
        except Exception as exc:
            raise ImportError("scipy 0.16+ is required for linear algebra") from exc

    ensure_blas._jitgraph_light = True  # type: ignore[attr-defined]
    numba_linalg.ensure_blas = ensure_blas
