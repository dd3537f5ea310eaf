"""BLAS for compiled kernels, bound by symbol name without importing ``scipy.linalg``.

Why: Numba's own binding (``numba_xxgemm``, what ``np.dot`` compiles to) imports the whole
``scipy.linalg`` package at the first product of every process, about 0.3 s of a cached program's
start.  The routines live in SciPy's ``scipy.linalg.cython_blas`` extension, which loads by itself
in about 0.02 s.  Its Fortran ``?gemm`` pointers are registered with LLVM as ``jitgraph_sgemm`` and
``jitgraph_dgemm``; compiled code calls those names, so machine code cached on disk links again in
a new process (where :func:`register` has run, at the import of this module).
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import types

#: Fortran routines bound, and the LLVM symbol each one is registered under.
ROUTINES = {"sgemm": "jitgraph_sgemm", "dgemm": "jitgraph_dgemm"}
_MODULE = "scipy.linalg.cython_blas"


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


def register() -> dict[str, int]:
    """Register the BLAS routines with LLVM (once per process); returns symbol -> address."""
    if not _REGISTERED:
        import llvmlite.binding as llvm

        capi = _load_cython_blas().__pyx_capi__
        for routine, symbol in ROUTINES.items():
            address = _capsule_pointer(capi[routine])
            llvm.add_symbol(symbol, address)
            _REGISTERED[symbol] = address
    return dict(_REGISTERED)


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
