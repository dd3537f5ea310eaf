"""Process-wide settings of compiling: Numba's options while a generated program compiles,
the disk cache generated modules go to, and the fingerprint that keys them."""
from __future__ import annotations

import gc
import hashlib
import importlib.util
import os
from contextlib import contextmanager

from ..targets import capabilities
from ..version import __version__
from .disk_cache import DiskCache
from .state import STATE

# LLVM optimization level for generated kernels (Numba's default is 3). Measured here on the
# 784-512-512-10 training step: level 1 compiles in 2.6-2.8 s of CPU time instead of 3.9-4.1 s,
# with no measurable loss in the elementwise, row-kernel or training-step benchmarks (the
# loops still vectorize). A user's NUMBA_OPT, where set, wins.
COMPILE_OPT_LEVEL = 1

# the jitgraph package's folder (this file is jitgraph/compiler/settings.py)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextmanager
def compile_settings(target: str = "cpu"):
    """Numba settings while a generated program of ``target`` compiles (its first call: Numba
    compiles lazily): the garbage collector off (``no_gc``) and, for a target compiling with
    Numba's CPU pipeline (its capabilities say ``numba_cpu``), the optimization level, under
    Numba's compiler lock, so other threads' compiles keep their settings. Other targets
    (CUDA kernels: NVVM) keep their own optimization level."""
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock
    if "NUMBA_OPT" in os.environ or not capabilities(target).numba_cpu:
        with no_gc():
            yield
        return
    with global_compiler_lock, no_gc():
        old = config.OPT
        config.OPT = type(old)(COMPILE_OPT_LEVEL)
        try:
            yield
        finally:
            config.OPT = old


@contextmanager
def no_gc():
    """The cyclic garbage collector off while Numba compiles. Why: a compile allocates
    hundreds of thousands of objects, which start collections that traverse everything Numba
    keeps (its typing and lowering registries): 12 % of a compiling process's time was in the
    collector, and the digits example's step compiled in 2.1-2.9 s instead of 2.5-3.6 s with it
    off (three interleaved runs). The compile's garbage is collected after, as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def disk_cache() -> DiskCache:
    """The disk cache generated modules go to (``JITGRAPH_CACHE_DIR``, else the default),
    opened again when that variable changes."""
    d = os.environ.get("JITGRAPH_CACHE_DIR")
    cache = STATE.disk_cache
    if cache is None or (d and str(cache.directory) != str(d)):
        cache = STATE.disk_cache = DiskCache(d or None)
    return cache


def fingerprint() -> str:
    """The fingerprint of jitgraph's code, part of every cache key (computed once per
    process)."""
    if STATE.fingerprint is None:
        STATE.fingerprint = codegen_fingerprint()
    return STATE.fingerprint


def kernels_folders() -> list[str]:
    """Where ``jitgraph.kernels`` comes from when that is outside the package's folder (a
    checkout maps its own ``kernels/``); found without importing the package root."""
    spec = importlib.util.find_spec("jitgraph.kernels")
    kdir = os.path.abspath(spec.submodule_search_locations[0])
    return [] if kdir.startswith(_PACKAGE + os.sep) else [kdir]


def package_folders() -> list[str]:
    """The folders holding jitgraph's source files: the package, and its kernels."""
    return [_PACKAGE, *kernels_folders()]


def codegen_fingerprint() -> str:
    """Hash of jitgraph's version and of every source file of the package (compiler,
    backends, kernels, the native loader and all they use), so a change in any of them
    invalidates the cache: no version constant to bump by hand. About 5 ms, once."""
    h = hashlib.sha256(__version__.encode())
    for root in package_folders():
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()[:16]
