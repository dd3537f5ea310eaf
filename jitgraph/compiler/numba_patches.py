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

import contextlib
import fcntl
import functools
import importlib.machinery
import itertools
import importlib.util
import os
import pickle
import re
import sys
import threading
import warnings
from typing import Any, Callable, Iterator, NamedTuple

from .state import STATE

__all__ = ["PRIVATE", "SUPPORTED", "Private", "fast_paths_enabled", "installed_version",
           "is_supported"]

#: The Numba releases the names below were checked on: ``>= SUPPORTED[0]`` and
#: ``< SUPPORTED[1]`` (``pyproject.toml`` pins the same range, and llvmlite's matching one).
SUPPORTED: tuple[str, str] = ("0.64", "0.69")

# the oldest with llvmlite 0.46.0 (CI's wheel check installs it), the newest with llvmlite 0.50.0
# (0.63 differs in its cache files' layout, 0.62 crashes on a damaged native bundle, 0.61's
# llvmlite has typed pointers)
_CHECKED = ("0.64.0", "0.68.1")


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
    Private("Cache", "_jitgraph_guarded", "mark", "the data files are already checksummed"),
    Private("IndexDataCacheFile", "load", "replace",
            "on the instance: under a shared file lock, the data file checked against its "
            "sidecar (bound to the index key) before unpickling; keep its object code"),
    Private("IndexDataCacheFile", "save", "replace",
            "on the instance: the index updated under an exclusive file lock, then the sidecar"),
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
    Private("caching", "_CacheLocator", "read",
            "the base class of jitgraph's locator (the kernels' helpers cache under "
            "JITGRAPH_CACHE_DIR, never in the installed package)"),
    Private("CacheImpl", "_locator_classes", "replace",
            "jitgraph's locator is put first (it declines every file outside jitgraph)"),
    Private("IndexDataCacheFile", "_load_index", "call", "read the index (under a lock)"),
    Private("IndexDataCacheFile", "_save_index", "call", "write the index (under a lock)"),
    Private("IndexDataCacheFile", "_data_name", "call", "the name of the Nth data file"),
    Private("IndexDataCacheFile", "_index_path", "read", "where the lock file goes beside"),
    Private("IndexDataCacheFile", "_dump", "call", "Numba's pickling of an entry"),
    Private("IndexDataCacheFile", "_open_for_write", "call",
            "Numba's atomic write (temp file, then os.replace)"),
    Private("Cache", "_index_key", "call", "the index key of a signature (to discard it)"),
    Private("_CompilerLock", "_lock", "read",
            "the RLock behind Numba's global compiler lock, taken across a fork"),
    Private("llvmlite.binding.ffi.lib", "_lock", "read",
            "llvmlite's FFI lock (an _LLVMLock holding an RLock), taken across a fork"),
    Private("CPUTargetOptions", "_jitgraph_noalias", "mark",
            "a decorator option for Numba's own Flags.noalias (set only for its parfor bodies): "
            "generated kernels' array arguments are marked noalias in LLVM"),
    Private("TargetOptions", "Mapping", "call", "how a decorator option maps to a flag"),
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
    name, else (an unusual layout) from the package itself. Safe while another thread is
    importing Numba (a half-initialised module has no ``__version__`` yet)."""
    version = getattr(sys.modules.get("numba"), "__version__", None)
    if version is not None:
        return version
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
    import numba         # the import system waits for another thread's import to finish
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


def noalias_option() -> bool:
    """Whether generated kernels say ``_jitgraph_noalias=True`` (decided without importing Numba, which
    a process running native bundles never does): on the Numba versions checked here, where
    :func:`allow_noalias` installs the option before a generated module is imported."""
    return fast_paths_enabled()


def allow_noalias() -> bool:
    """Let ``@njit(_jitgraph_noalias=True)`` set Numba's ``Flags.noalias``: LLVM then knows that a
    kernel's array arguments do not overlap, so it keeps loads in registers across stores and
    vectorizes. Numba sets that flag only on the bodies of ``prange`` loops; without it a
    serial kernel of the GPT step (a layer norm reading three arrays and writing three) ran
    3.6x slower than with it. Generated kernels never receive one buffer through two
    arguments unless both are read, or the write goes to the element just read (a donated
    buffer, ``memory.py``). That second case breaks noalias's promise: ``loop_ir`` marks only
    the arrays a kernel reads, after a kernel marked throughout gave wrong results once LLVM
    unrolled its loop; this flag still covers every array of the kernels Numba compiles. False
    (and generated kernels do without) on a Numba outside :data:`SUPPORTED` or without the
    flag."""
    decided = STATE.patches.get("noalias")
    if decided is not None:
        return decided
    ok = False
    if fast_paths_enabled():
        try:
            from numba.core import cpu, options
            from numba.core.compiler import Flags
            if hasattr(Flags, "noalias"):
                if not isinstance(getattr(cpu.CPUTargetOptions, "_jitgraph_noalias", None),
                                  options.TargetOptions.Mapping):
                    cpu.CPUTargetOptions._jitgraph_noalias = \
                        options.TargetOptions.Mapping("noalias")
                ok = True
        except (ImportError, AttributeError, TypeError):
            ok = False
    STATE.patches["noalias"] = ok
    return ok


# ----------------------------------------------------------------------------- Numba's cache

def dispatcher_cache(disp: Any) -> Any | None:
    """The ``numba.core.caching.Cache`` of a dispatcher, or None (no ``cache=True``, or the
    fast paths are off: then nothing of it is patched)."""
    if not fast_paths_enabled():
        return None
    from numba.core.caching import Cache

    cache = getattr(disp, "_cache", None)
    return cache if isinstance(cache, Cache) else None


def has_cached_code(disp: Any) -> bool | None:
    """Whether Numba's cache of ``disp`` holds machine code of some signature (its index file
    exists); None where that cannot be told (no cache, fast paths off)."""
    cache = dispatcher_cache(disp)
    if cache is None:
        return None
    return os.path.exists(cache._cache_file._index_path)


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


def is_guarded(cache: Any) -> bool:
    """Whether :func:`guard_cache` (or :func:`mark_guarded`) already handled this cache."""
    return getattr(cache, "_jitgraph_guarded", False)


def mark_guarded(cache: Any) -> None:
    """Remember that this cache needs no further guarding (e.g. it was disabled)."""
    cache._jitgraph_guarded = True


@contextlib.contextmanager
def file_lock(path: str, exclusive: bool) -> Iterator[None]:
    """``flock`` on *path* (created 0600): shared for readers, exclusive for writers, across
    processes and threads alike (each call opens its own file description). Where the file
    system has no locks, it goes on unlocked: the checksums still refuse a crossed entry."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)            # releases the lock


def guard_cache(cache: Any, verify: Callable[[str, str, bytes], None],
                seal: Callable[[str, str, bytes], None], load_overload: Callable[..., Any],
                save_overload: Callable[..., None]) -> None:
    """Route one cache's index and data files through the caller's checks, under a lock.

    Numba updates an index by an unlocked read-modify-write (read it, take the first free
    ``.N.nbc``, write both), so two processes saving two overloads at once could leave the
    index naming the other overload's data, and unboxing compares only item sizes: a wrong
    program ran silently. Here every index update holds an exclusive ``flock`` on
    ``<index>.lock`` and every read a shared one. ``seal(path, key, payload)`` runs after a
    data file is written (the caller's checksum sidecar), ``verify(path, key, payload)``
    before its bytes are unpickled (raise to refuse them); ``key`` is the index key's text,
    so a data file is bound to the signature and code it was saved for.
    ``load_overload(load, sig, target_context, discard)`` and ``save_overload(save, sig,
    data)`` replace the cache's methods, given the originals (loading without the refresh)
    and ``discard()``, which drops that signature from the index."""
    cache_file = cache._cache_file
    lock = cache_file._index_path + ".lock"
    load = functools.partial(load_without_refresh, cache, cache.load_overload)
    save = cache.save_overload

    def locked_load(key: Any) -> Any:
        with file_lock(lock, exclusive=False):
            name = cache_file._load_index().get(key)
            if name is None:
                return None
            path = cache_file._data_path(name)
            try:
                with open(path, "rb") as f:
                    payload = f.read()
            except FileNotFoundError:
                return None
            verify(path, repr(key), payload)
        return _remember_object(pickle.loads(payload))

    def locked_save(key: Any, data: Any) -> None:
        payload = cache_file._dump(data)
        with file_lock(lock, exclusive=True):
            overloads = cache_file._load_index()
            name = overloads.get(key)
            if name is None:
                taken = set(overloads.values())
                name = next(n for n in map(cache_file._data_name, itertools.count(1))
                            if n not in taken)
            path = cache_file._data_path(name)
            with cache_file._open_for_write(path) as f:
                f.write(payload)
            seal(path, repr(key), payload)
            if overloads.get(key) != name:
                overloads[key] = name
                cache_file._save_index(overloads)

    def discard(sig: Any, target_context: Any) -> None:
        key = cache._index_key(sig, target_context.codegen())
        with file_lock(lock, exclusive=True):
            try:
                overloads = cache_file._load_index()
            except Exception:       # the index itself is damaged: start it again
                overloads = {}
            overloads.pop(key, None)
            cache_file._save_index(overloads)

    def guarded_load(sig: Any, target_context: Any) -> Any:
        return load_overload(load, sig, target_context,
                             functools.partial(discard, sig, target_context))

    def guarded_save(sig: Any, data: Any) -> None:
        save_overload(save, sig, data)

    cache_file.load = locked_load
    cache_file.save = locked_save
    cache.load_overload = guarded_load
    cache.save_overload = guarded_save
    cache._jitgraph_guarded = True


# ----------------------------------------------------------------------------- cache location

def add_cache_locator(where: Callable[[str], tuple[str, str] | None]) -> bool:
    """Put jitgraph's locator first in Numba's list, once per process: a function whose
    source file ``where(py_file)`` maps to ``(directory, stamp)`` keeps its cache files in
    that directory, with that source stamp; for any other file (``None``) Numba's own
    locators decide as before. Why: Numba's default puts the kernels' helpers in the
    installed package's ``__pycache__``, shared by every process of the installation,
    outside jitgraph's cache and its checks, and impossible in a read-only install. False
    where ``NUMBA_CACHE_LOCATOR_CLASSES`` overrides the list (then Numba's choice stands)."""
    with _LOCK:
        if "locator" in STATE.patches:
            return STATE.patches["locator"] is not None
        from numba.core import caching, config

        class JitgraphLocator(caching._CacheLocator):
            """Cache files of jitgraph's own functions, in the directory ``where`` gives."""

            def __init__(self, py_func: Any, path: str, stamp: str) -> None:
                self._lineno = py_func.__code__.co_firstlineno
                # where Numba points its warning about code it cannot cache (NUMBA_OPT=0
                # keeps global arrays as dynamic globals): without it that warning was an
                # AttributeError, reported as a failed cache save
                self._py_file = py_func.__code__.co_filename
                self._path, self._stamp = path, stamp

            def ensure_cache_path(self) -> None:
                os.makedirs(self._path, mode=0o700, exist_ok=True)

            def get_cache_path(self) -> str:
                return self._path

            def get_source_stamp(self) -> str:
                return self._stamp

            def get_disambiguator(self) -> str:
                return str(self._lineno)

            @classmethod
            def from_function(cls, py_func: Any, py_file: str) -> Any:
                found = where(py_file)
                if found is None:
                    return None
                self = cls(py_func, *found)
                try:
                    self.ensure_cache_path()
                except OSError:
                    return None
                return self

        if getattr(config, "CACHE_LOCATOR_CLASSES", None):
            STATE.patches["locator"] = None
            return False
        caching.CacheImpl._locator_classes.insert(0, JitgraphLocator)
        STATE.patches["locator"] = JitgraphLocator
        return True


# ----------------------------------------------------------------------------- fork safety

def _fork_locks() -> list:
    """The process-wide locks a fork must not copy while another thread holds them, in the
    order compiling threads take them: Numba's compiler lock, then llvmlite's FFI lock (each
    imported only where its module already is: a lock never created is never held)."""
    locks = []
    compiler_lock = sys.modules.get("numba.core.compiler_lock")
    if compiler_lock is not None and hasattr(compiler_lock, "global_compiler_lock"):
        locks.append(compiler_lock.global_compiler_lock._lock)
    ffi = sys.modules.get("llvmlite.binding.ffi")
    lib = getattr(ffi, "lib", None) if ffi is not None else None
    if lib is not None:
        try:
            locks.append(object.__getattribute__(lib, "_lock")._lock)
        except AttributeError:
            pass
    return locks


_HELD: list = []
_OUTER_LOCKS: list = []     # jitgraph's own locks, taken before Numba's (``hold_across_fork``)


def _before_fork() -> None:
    # Wait until no thread loads, compiles or calls LLVM: a child must not start with a lock
    # held by a thread that does not exist there (its first call would block forever).
    for lock in [*_OUTER_LOCKS, *_fork_locks()]:
        lock.acquire()
        _HELD.append(lock)


def _after_fork() -> None:
    while _HELD:                # newest first
        _HELD.pop().release()


def hold_across_fork(lock: Any) -> None:
    """Take one of jitgraph's module locks across every fork too, before Numba's: a lock
    that is never taken while Numba's compiler lock or llvmlite's is held (so the order
    cannot deadlock), registered in the order threads take them."""
    install_fork_guard()
    with _LOCK:
        _OUTER_LOCKS.append(lock)


def install_fork_guard() -> None:
    """Take Numba's and llvmlite's locks across every ``fork()`` of this process (once):
    a process forked while a thread compiles (a native bundle being written, another
    thread's first call) used to hang in its own first compile."""
    with _LOCK:
        if STATE.patches.get("fork_guard"):
            return
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                            after_in_child=_after_fork)
        STATE.patches["fork_guard"] = True


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


#: GNU OpenMP's spin before an idle thread sleeps, on a machine whose cores other processes are
#: using when the threads start (``machine_busy``), where the user set neither GOMP_SPINCOUNT
#: nor OMP_WAIT_POLICY. Its default (300,000 spins, about a millisecond) made a training step's
#: threads spin at every barrier while the thread they waited for had no core: with one busy
#: process per core the GPT benchmark's tiny step took 514-528 ms instead of 20 (2-core Xeon);
#: with 1,000 spins, 38-94 ms. On a quiet machine the default is kept: there the short spin
#: cost the same step 1.3-1.7x (each barrier a sleep and a wake-up).
OPENMP_SPIN_COUNT_BUSY = "1000"


def machine_busy(samples: int = 16) -> bool:
    """Whether other processes are running on this machine now: the median count of runnable
    threads (``procs_running`` of /proc/stat, this one included) over ``samples`` reads (about
    0.3 ms) is above one. False where /proc/stat cannot be read."""
    counts = []
    try:
        for _ in range(samples):
            with open("/proc/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"procs_running"):
                        counts.append(int(line.split()[1]))
                        break
    except (OSError, ValueError):
        return False
    return bool(counts) and sorted(counts)[len(counts) // 2] > 1


@contextlib.contextmanager
def _short_openmp_spin():
    """``GOMP_SPINCOUNT`` set for the moment the threading layer loads (GNU OpenMP reads its
    environment once, when it loads) where ``machine_busy``, then taken out again: child
    processes (a PyTorch or JAX run beside, whose OpenMP reads the same variable) inherit the
    environment as it was."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ or not machine_busy():
        yield
        return
    os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT_BUSY
    try:
        yield
    finally:
        os.environ.pop("GOMP_SPINCOUNT", None)


def start_threads() -> None:
    """Start Numba's threading layer now (once per process), with ``_short_openmp_spin``: before
    any compiled driver or kernel starts it by itself."""
    if not STATE.patches.get("threads_started"):
        layer = threading_layer()
        STATE.patches["threads_started"] = True
        if layer is not None and layer.__name__.rsplit(".", 1)[-1] == "omppool" and \
                hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forked_from_openmp)


def _forked_from_openmp() -> None:
    """In a child forked after GNU OpenMP's threads started (a data loader's worker): OpenMP
    terminates the process at its next parallel loop, so from here on programs are compiled
    and run without threads (``serial_kernels``; every jit function compiles again, once)."""
    from .. import config
    STATE.patches["serial_kernels"] = True
    config.mark_process("serial")


def serial_kernels() -> bool:
    """Whether this process must run no parallel kernel (see ``_forked_from_openmp``)."""
    return bool(STATE.patches.get("serial_kernels"))


def threading_layer() -> Any | None:
    """``_threading_layer`` with ``_short_openmp_spin``."""
    with _short_openmp_spin():
        return _threading_layer()


def _threading_layer() -> Any | None:
    """The extension of Numba's threading layer, its threads started as Numba starts them:
    Numba's own (``numba.get_num_threads`` starts it) where Numba is imported; else the one
    ``NUMBA_THREADING_LAYER`` names, else Numba's own order: TBB (the one layer that is
    safe with both threads and forks), OpenMP, workqueue; with as many threads. None where
    no layer loads."""
    if "numba" in sys.modules:
        import numba
        numba.get_num_threads()
        lib = {"tbb": "tbbpool", "omp": "omppool", "workqueue": "workqueue"}[
            numba.threading_layer()]
        return importlib.import_module(f"numba.np.ufunc.{lib}")
    wanted = os.environ.get("NUMBA_THREADING_LAYER", "default").lower()
    names = {"tbb": ["tbbpool"], "omp": ["omppool"], "workqueue": ["workqueue"],
             "threadsafe": ["tbbpool", "omppool"], "forksafe": ["tbbpool", "workqueue"]}.get(
                 wanted, ["tbbpool", "omppool", "workqueue"])
    module = None
    for name in names:
        try:
            module = load_extension(name, f"np/ufunc/{name}")
            break
        except ImportError:
            continue
    if module is None:
        return None
    from .. import config
    threads = config.numba_threads()
    import ctypes
    ctypes.CFUNCTYPE(None, ctypes.c_int)(module.launch_threads)(threads)
    ctypes.CFUNCTYPE(None, ctypes.c_int)(module.set_num_threads)(threads)
    return module
