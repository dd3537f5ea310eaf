"""Where the machine code of jitgraph's own ``@njit(cache=True)`` functions lives.

Why: the hand-written helpers in ``kernels/`` (products, row loops, fast math) are cached by
Numba, whose default puts their files in the installed package's ``__pycache__``: shared by
every process of one installation, outside ``JITGRAPH_CACHE_DIR`` and outside jitgraph's
checks, updated without a lock (two processes saving two overloads at once crossed an index,
and an int64 product then ran the float64 overload's machine code), and impossible in a
read-only install. So before the first helper is defined (``kernels/_cache.py`` calls
:func:`install`), a locator of jitgraph's is put first in Numba's list: every function
defined in a source file of the jitgraph package keeps its files in
``<cache dir>/helpers/<fingerprint>/<folder>/``, where the fingerprint covers every source
file of the package (:func:`settings.fingerprint`), and each such cache is guarded as the
disk cache's generated modules are (``DiskCache._wrap_cache``: locked index updates, data
files bound to their keys by checksum, damaged files discarded with one warning and
rebuilt). A cache directory that cannot be used (not ours, not private, not writable) gives
one warning and a private temporary directory for this process instead. Nothing is ever
written into the package. ``JITGRAPH_HELPER_CACHE_DIR`` (:data:`SHARED_ENV`) lets a test
runner share one helpers cache between the cache directories of its many processes.
"""
from __future__ import annotations

import os
import tempfile
import threading
import warnings
from typing import Any

from . import numba_patches
from .disk_cache import CacheWarning, unsafe_reason
from .settings import disk_cache, fingerprint, package_folders
from .state import STATE

__all__ = ["helpers_directory", "install"]

_LOCK = threading.Lock()
_ROOTS: list[str] = []          # the package's source folders (the checkout's kernels/ too)
_CHOSEN: dict[str, str] = {}    # "dir": the helpers' directory for this process


def _package_roots() -> list[str]:
    """The folders whose source files are jitgraph's: the package and its kernels."""
    if not _ROOTS:
        roots = {os.path.realpath(p) for p in package_folders()}
        _ROOTS.extend(sorted(roots, key=len, reverse=True))
    return _ROOTS


def helpers_directory() -> str:
    """``<cache dir>/helpers/<fingerprint>`` (made 0700), chosen once per process; a private
    temporary directory where the cache directory cannot be used (with one warning)."""
    chosen = _CHOSEN.get("dir")
    if chosen is not None:
        return chosen
    with _LOCK:
        if "dir" not in _CHOSEN:
            _CHOSEN["dir"] = _choose_directory()
    return _CHOSEN["dir"]


#: Where a test runner keeps one helpers cache for the many cache directories its processes
#: use (each would otherwise compile the same helpers again): ``<it>/<fingerprint>``.
SHARED_ENV = "JITGRAPH_HELPER_CACHE_DIR"


def _choose_directory() -> str:
    cache = disk_cache()
    reason = cache.ensure_directory()
    path = os.path.join(str(cache.directory), "helpers", fingerprint())
    shared = os.environ.get(SHARED_ENV)
    if shared and not reason:
        path = os.path.join(os.path.abspath(shared), fingerprint())
    if not reason:
        try:
            for d in (os.path.dirname(path), path):
                os.makedirs(d, mode=0o700, exist_ok=True)
                reason = unsafe_reason(os.stat(d), f"helper cache directory {d!r}")
                if reason:
                    break
        except OSError as exc:
            reason = f"cannot create {path!r}: {exc}"
    if not reason:
        return path
    private = tempfile.mkdtemp(prefix="jitgraph-helpers-")
    STATE.private_tmpdirs.append(private)
    warnings.warn(CacheWarning(f"{reason}; the kernels' helpers compile into the private "
                               f"temporary directory {private!r} for this process"),
                  stacklevel=3)
    return private


def _where(py_file: str) -> tuple[str, str] | None:
    """The cache folder and source stamp of a function defined in *py_file*: one folder per
    source folder of the package (``kernels``, ``compiler``...); None outside jitgraph."""
    real = os.path.realpath(py_file)
    for root in _package_roots():
        if real.startswith(root + os.sep):
            rel = os.path.relpath(os.path.dirname(real), os.path.dirname(root))
            return os.path.join(helpers_directory(), rel.replace(os.sep, "-")), fingerprint()
    return None


def _guard(disp: Any) -> None:
    """Guard the cache of a dispatcher defined in one of the package's files."""
    cache = numba_patches.dispatcher_cache(disp)
    if cache is None or numba_patches.is_guarded(cache):
        return
    if not os.path.abspath(cache.cache_path).startswith(helpers_directory() + os.sep):
        return
    stem = os.path.splitext(os.path.basename(disp.py_func.__code__.co_filename))[0]
    disk_cache().guard_dispatcher(disp, stem, set())


def install() -> None:
    """Route the package's own cached functions to :func:`helpers_directory`, guarded; once
    per process, before the first is defined."""
    if STATE.helper_guard is not None:
        return
    with _LOCK:
        if STATE.helper_guard is not None:
            return
        numba_patches.add_cache_locator(_where)
        from .disk_cache import on_enable_caching
        numba_patches.install_enable_caching_hook(on_enable_caching)
        STATE.helper_guard = _guard
