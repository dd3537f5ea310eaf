"""The one module of jitgraph that reads or replaces Numba's undocumented internals.

Why one module: jitgraph's fast paths (cached machine code loaded without Numba's context
refresh, checksummed Numba cache files, native bundles that run without importing Numba) rely
on names Numba may change in any release. Every such name is listed in :data:`PRIVATE`, with
what it is used for and the Numba versions it was checked on; ``pyproject.toml`` pins the
same range (:data:`SUPPORTED`). On any other Numba version :func:`fast_paths_enabled` is False
(one ``RuntimeWarning`` per process) and the functions here patch nothing, so jitgraph takes
Numba's documented ``@njit(cache=True)`` path: each process refreshes Numba's target context
before its first load from the cache (slower loads), damaged Numba cache files fail as Numba
makes them fail, and native bundles are neither written nor read.

What was installed lives in ``STATE.patches`` (``state.py``), for the process's lifetime:
``"fast_paths"`` (the decision, made once), ``"enable_caching"`` (Numba's own method, once the
hook wraps it), and native bundles' ``"runtime"``, ``"parallel"``, ``"engines"``, ``"defs"``
and ``"new_cfunction"`` (``native.py``).

Not here: ``kernels/blas.py`` replaces ``numba.np.linalg.ensure_blas`` (a public name) before
a first compile; it stays there because the sources of ``kernels/`` are part of every cache key.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
import warnings
from typing import Any, Callable, NamedTuple

from .state import STATE

__all__ = ["PRIVATE", "SUPPORTED", "Private", "fast_paths_enabled", "installed_version",
           "is_supported"]

#: The Numba releases the names below were checked on: ``>= SUPPORTED[0]`` and
#: ``< SUPPORTED[1]`` (``pyproject.toml`` pins the same range, and llvmlite's matching one).
SUPPORTED: tuple[str, str] = ("0.68", "0.69")

_CHECKED = ("0.68.1",)     # with llvmlite 0.50.0


class Private(NamedTuple):
    """One undocumented name of Numba that this module touches."""
    owner: str       # the object or module it belongs to
    name: str        # the attribute (or module) itself
    use: str         # "read", "call", "replace", "mark" (jitgraph adds it) or "module"
    why: str
    checked: tuple[str, ...] = _CHECKED


#: Every undocumented name this module touches (a test checks the list against the source).
PRIVATE: tuple[Private, ...] = (
    Private("Dispatcher", "_cache", "read",
            "the dispatcher's numba.core.caching.Cache (a NullCache without cache=True)"),
    Private("Dispatcher", "enable_caching", "replace",
            "wrapped on the class: guard each cache of a generated module as it is created "
            "(functions with signatures load while their module body runs)"),
    Private("Dispatcher.enable_caching", "_jitgraph_original", "mark",
            "Numba's own method, kept on the wrapper (installed once)"),
    Private("Cache", "_cache_file", "read", "the IndexDataCacheFile holding the data files"),
    Private("Cache", "_guard_against_spurious_io_errors", "call",
            "load_overload's error guard, kept when skipping the refresh"),
    Private("Cache", "_load_overload", "call", "load_overload without target_context.refresh()"),
    Private("Cache", "load_overload", "replace",
            "on the instance: no context refresh, and damaged entries mean 'recompile'"),
    Private("Cache", "save_overload", "replace", "on the instance: a failed save only warns"),
    Private("Cache", "_jitgraph_no_refresh", "mark", "load_overload already skips the refresh"),
    Private("Cache", "_jitgraph_guarded", "mark", "the data files are already checksummed"),
    Private("IndexDataCacheFile", "_load_data", "replace",
            "check the .sha256 sidecar before unpickling; keep the entry's object code"),
    Private("IndexDataCacheFile", "_save_data", "replace", "write the .sha256 sidecar after a save"),
    Private("IndexDataCacheFile", "_data_path", "call", "the path of a data file"),
    Private("rtsys", "initialize", "call",
            "the runtime's symbols, all that cached machine code needs (normally via refresh)"),
    Private("CodeLibrary", "_compiled_object", "read",
            "object code of a library compiled in this process (native bundles)"),
    Private("CodeLibrary", "_jitgraph_object", "mark",
            "object code of a library loaded from the cache (MCJIT consumes Numba's copy)"),
    Private("CompileResult", "target_context.call_conv.get_function_type", "call",
            "the native entry point's LLVM type (native bundles call it directly)"),
    Private("CompileResult", "fndesc.llvm_func_name", "read", "the native entry point's symbol"),
    Private("numba", "_helperlib", "module",
            "addresses of Numba's C helpers (c_helpers), also loaded by file without Numba"),
    Private("numba.core.runtime", "_nrt_python", "module",
            "addresses of Numba's runtime functions (c_helpers), also loaded by file"),
    Private("numba.np.ufunc", "omppool / workqueue / tbbpool", "module",
            "the threading layer's C functions (launch_threads, parallel_for, ...)"),
)


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``"0.68.1rc1"`` -> ``(0, 68, 1)``."""
    m = re.match(r"\d+(\.\d+)*", version.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def is_supported(version: str) -> bool:
    """Whether a Numba version is in the range :data:`PRIVATE` was checked on."""
    low, high = (_release(v) for v in SUPPORTED)
    return low <= _release(version) < high


def installed_version() -> str:
    """Numba's version without importing Numba (0.35 s): from its installed metadata folder's
    name, else (an unusual layout) from the package itself."""
    if "numba" in sys.modules:
        return sys.modules["numba"].__version__
    spec = importlib.util.find_spec("numba")
    if spec is not None and spec.submodule_search_locations:
        site = os.path.dirname(list(spec.submodule_search_locations)[0])
        try:
            names = os.listdir(site)
        except OSError:
            names = []
        found = [n[len("numba-"):-len(".dist-info")] for n in names
                 if n.startswith("numba-") and n.endswith(".dist-info")]
        if len(found) == 1:
            return found[0]
    import numba
    return numba.__version__


_LOCK = threading.RLock()


def fast_paths_enabled() -> bool:
    """Whether the installed Numba is in :data:`SUPPORTED`, decided once per process; on
    another version, warn once: jitgraph then uses Numba's documented caching only."""
    decided = STATE.patches.get("fast_paths")
    if decided is not None:
        return decided
    with _LOCK:
        decided = STATE.patches.get("fast_paths")
        if decided is None:
            version = installed_version()
            decided = is_supported(version)
            if not decided:
                warnings.warn(
                    f"numba {version} is installed, but jitgraph's fast paths through Numba's "
                    f"internals were checked on numba>={SUPPORTED[0]},<{SUPPORTED[1]} only: they "
                    "are off, and jitgraph falls back to Numba's documented caching (slower "
                    "loads from the disk cache, no native bundles)", RuntimeWarning, stacklevel=2)
            STATE.patches["fast_paths"] = decided
    return decided


# ----------------------------------------------------------------------------- Numba's cache

def dispatcher_cache(disp: Any) -> Any | None:
    """The ``numba.core.caching.Cache`` of a dispatcher, or None (no ``cache=True``, or the
    fast paths are off: then nothing of it is patched)."""
    if not fast_paths_enabled():
        return None
    from numba.core.caching import Cache

    cache = getattr(disp, "_cache", None)
    return cache if isinstance(cache, Cache) else None


_LOADED = threading.local()     # object code of the entry being loaded on this thread


def _remember_object(payload: Any) -> Any:
    """Keep the object code of a Numba cache entry as it is read (its ``_reduce`` payload
    starts with the library's ``(name, "object", (object code, bitcode))``)."""
    try:
        kind, data = payload[0][1], payload[0][2]
        if kind == "object" and isinstance(data[0], bytes):
            _LOADED.object = data[0]
    except Exception:
        pass
    return payload


def load_without_refresh(cache: Any, load: Any, sig: Any, target_context: Any) -> Any:
    """Numba's ``Cache.load_overload`` without its ``target_context.refresh()``.

    Why: the refresh imports and installs every lowering registry Numba has (about 0.4 s, plus
    0.3 s of ``scipy.linalg`` through ``numba.np.linalg``), which only *compiling* needs; cached
    machine code needs the runtime's symbols (``rtsys.initialize``) and nothing else.  A later
    compile still refreshes (Numba's compiler does so itself)."""
    guard = getattr(cache, "_guard_against_spurious_io_errors", None)
    inner = getattr(cache, "_load_overload", None)
    if guard is None or inner is None:  # another Numba: its own path
        return load(sig, target_context)
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)
    _LOADED.object = None
    with guard():
        cres = inner(sig, target_context)
        if cres is not None and _LOADED.object is not None:
            # MCJIT consumes the library's copy; native bundles (``native.py``) need one
            cres.library._jitgraph_object = _LOADED.object
        _LOADED.object = None
        return cres
    return None  # the guard swallowed a spurious I/O error: "not cached"


def skip_refresh(cache: Any) -> None:
    """Let one cache load without Numba's context refresh (see :func:`load_without_refresh`)
    and keep the object code it loads; once per cache."""
    if getattr(cache, "_jitgraph_no_refresh", False):
        return
    load = cache.load_overload
    cache.load_overload = functools.partial(load_without_refresh, cache, load)
    cache_file = cache._cache_file
    load_data = cache_file._load_data
    cache_file._load_data = lambda name, load_data=load_data: _remember_object(load_data(name))
    cache._jitgraph_no_refresh = True


def is_guarded(cache: Any) -> bool:
    """Whether :func:`guard_cache` (or :func:`mark_guarded`) already handled this cache."""
    return getattr(cache, "_jitgraph_guarded", False)


def mark_guarded(cache: Any) -> None:
    """Remember that this cache needs no further guarding (e.g. it was disabled)."""
    cache._jitgraph_guarded = True


def guard_cache(cache: Any, before_load: Callable[[str], None],
                after_save: Callable[[str], None], load_overload: Callable[..., Any],
                save_overload: Callable[..., None]) -> None:
    """Route one cache's file and overload I/O through the caller's checks.

    ``before_load(path)`` runs before Numba unpickles a data file (raise to refuse it),
    ``after_save(path)`` after Numba wrote one; ``load_overload(load, sig, target_context)``
    and ``save_overload(save, sig, data)`` replace the cache's methods, given the original
    (loading without the refresh) to call."""
    cache_file = cache._cache_file
    load_data, save_data = cache_file._load_data, cache_file._save_data
    load = functools.partial(load_without_refresh, cache, cache.load_overload)
    save = cache.save_overload

    def checked_load_data(name: str) -> Any:
        before_load(cache_file._data_path(name))
        return _remember_object(load_data(name))

    def checked_save_data(name: str, data: Any) -> None:
        save_data(name, data)
        after_save(cache_file._data_path(name))

    def guarded_load(sig: Any, target_context: Any) -> Any:
        return load_overload(load, sig, target_context)

    def guarded_save(sig: Any, data: Any) -> None:
        save_overload(save, sig, data)

    cache_file._load_data = checked_load_data
    cache_file._save_data = checked_save_data
    cache.load_overload = guarded_load
    cache.save_overload = guarded_save
    cache._jitgraph_guarded = True


def install_enable_caching_hook(hook: Callable[[Any], None]) -> bool:
    """Wrap ``Dispatcher.enable_caching`` once so ``hook(dispatcher)`` runs as each cache is
    created. False where the fast paths are off or Numba has no such method.

    Why: ``@njit(signature, cache=True)`` loads from Numba's cache inside the decorator
    (``enable_caching()`` then ``compile(sig)``), before the module body finishes."""
    if not fast_paths_enabled():
        return False
    with _LOCK:
        from numba.core.dispatcher import Dispatcher

        original = getattr(Dispatcher, "enable_caching", None)
        if original is None:  # pragma: no cover - other Numba versions
            return False
        if getattr(original, "_jitgraph_original", None) is not None:
            return True   # installed (a reset state forgets it; the class does not)

        @functools.wraps(original)
        def enable_caching(self: Any) -> None:
            original(self)
            hook(self)

        enable_caching._jitgraph_original = original  # type: ignore[attr-defined]
        Dispatcher.enable_caching = enable_caching
        STATE.patches["enable_caching"] = original
        return True


# ----------------------------------------------------------------------------- native bundles

def object_code(cres: Any) -> bytes | None:
    """The object code of a compiled overload: loaded from the cache (kept by
    :func:`load_without_refresh`) or compiled in this process; None where unknown."""
    if not fast_paths_enabled():
        return None
    lib = cres.library
    obj = getattr(lib, "_jitgraph_object", None)
    if obj is None:
        obj = getattr(lib, "_compiled_object", None)
    return obj if isinstance(obj, bytes) else None


def entry_point(cres: Any) -> tuple[Any, str]:
    """The LLVM function type and symbol of an overload's native entry point."""
    fnty = cres.target_context.call_conv.get_function_type(
        cres.signature.return_type, cres.signature.args)
    return fnty, cres.fndesc.llvm_func_name


def load_extension(name: str, relpath: str) -> Any:
    """One of Numba's C extensions, loaded by file under a private name (so the ``numba``
    package is not imported; a later ``import numba`` loads its own copy as usual)."""
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("numba is not installed")
    base = os.path.join(list(spec.submodule_search_locations)[0], *relpath.split("/"))
    folder = os.path.dirname(base)
    stem = os.path.basename(base)
    for fn in os.listdir(folder):
        if fn.startswith(stem + ".") and fn.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            loader = importlib.machinery.ExtensionFileLoader(
                f"_jitgraph_native_rt.{stem}", os.path.join(folder, fn))
            espec = importlib.util.spec_from_loader(loader.name, loader)
            module = importlib.util.module_from_spec(espec)
            loader.exec_module(module)
            return module
    raise ImportError(f"numba's {relpath} extension not found")


def runtime_symbols() -> dict[str, int]:
    """The names Numba's machine code calls its C helpers and runtime functions by (as
    ``numba.core.base`` and ``numba.core.runtime.nrt`` register them), with their addresses:
    from Numba's modules where Numba is imported, else from its extensions loaded by file."""
    if "numba" in sys.modules:
        from numba import _helperlib as helperlib
        from numba.core.runtime import _nrt_python as nrt
    else:
        helperlib = load_extension("_helperlib", "_helperlib")
        nrt = load_extension("_nrt_python", "core/runtime/_nrt_python")
    symbols = {"numba_" + name: addr for name, addr in helperlib.c_helpers.items()}
    symbols.update({name if name.startswith("_") else "NRT_" + name: addr
                    for name, addr in nrt.c_helpers.items()})
    return symbols


def threading_layer() -> Any | None:
    """The extension of Numba's threading layer, its threads started as Numba starts them:
    Numba's own (``numba.get_num_threads`` starts it) where Numba is imported; else the one
    ``NUMBA_THREADING_LAYER`` names, else OpenMP, else Numba's workqueue (Numba prefers TBB
    where it is installed; then the kernels run on another pool, with the same results),
    with as many threads. None where no layer loads."""
    if "numba" in sys.modules:
        import numba
        numba.get_num_threads()
        lib = {"tbb": "tbbpool", "omp": "omppool", "workqueue": "workqueue"}[
            numba.threading_layer()]
        return importlib.import_module(f"numba.np.ufunc.{lib}")
    wanted = os.environ.get("NUMBA_THREADING_LAYER", "default").lower()
    names = {"tbb": ["tbbpool"], "omp": ["omppool"], "workqueue": ["workqueue"],
             "threadsafe": ["omppool"], "forksafe": ["workqueue"]}.get(
                 wanted, ["omppool", "workqueue"])
    module = None
    for name in names:
        try:
            module = load_extension(name, f"np/ufunc/{name}")
            break
        except ImportError:
            continue
    if module is None:
        return None
    try:
        threads = int(os.environ.get("NUMBA_NUM_THREADS") or 0) or \
            len(os.sched_getaffinity(0))
    except (AttributeError, ValueError):
        threads = os.cpu_count() or 1
    import ctypes
    ctypes.CFUNCTYPE(None, ctypes.c_int)(module.launch_threads)(threads)
    ctypes.CFUNCTYPE(None, ctypes.c_int)(module.set_num_threads)(threads)
    return module
