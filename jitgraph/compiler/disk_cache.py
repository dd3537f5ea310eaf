"""On-disk cache of generated Numba modules.

Why this exists: ``@numba.njit(cache=True)`` only works for functions that come
from a real source file (``exec`` of a string has no cache locator, see
numba/numba#3501).  jitgraph therefore writes every generated module to a
content-addressed file ``<cache dir>/<sha256>.py`` and imports it under the
unique name ``jitgraph_gen_<sha256>``.  Numba then stores the machine code in
``<cache dir>/__pycache__`` (``<sha256>.<func>-<line>.py311.nbi/.nbc``), so a
new process that generates the same source loads the compiled code instead of
compiling again.

Design points (each one is covered by ``tests/test_disk_cache.py``):

* The file name is the SHA-256 of the file's bytes.  The bytes are the
  generated source followed by a one-line comment holding the cache key
  (``key_extra``, :data:`FORMAT_VERSION`, Python/NumPy/Numba/llvmlite
  versions, host CPU name and features).  Putting the key *after* the source
  keeps the line numbers of the generated code unchanged.  On load the bytes
  must hash to the name, otherwise the entry is corrupt: it is discarded and
  rewritten with a :class:`CacheWarning`.
* The module is registered in ``sys.modules`` *before* it is executed: Numba
  re-imports the module by name when it rebuilds a cached function.
* Writes are atomic: a private temporary file in the same directory, then
  ``os.replace``.  Concurrent processes writing the same entry write identical
  bytes, and Numba writes its own files the same way.
* Cached files are executable code (the ``.py`` is imported, Numba's index and
  data files are unpickled).  The cache directory is created with mode 0700;
  a directory or file not owned by the current user or writable by group or
  others is refused with a :class:`CacheWarning`, and the module is then
  compiled from a fresh private temporary directory instead.  The verified
  bytes are what gets executed (no second read of the file, no ``.pyc``).
* Numba's own cache files are not checksummed by Numba.  With numba 0.68.1 a
  truncated or garbled ``.nbi``/``.nbc`` makes the first call raise
  (``EOFError``, ``UnpicklingError``, ``UnicodeDecodeError``, ``RuntimeError:
  LLVM bitcode parsing error``), and changed bytes inside the cached object
  code are executed as they are (the process died with SIGTRAP in our test).
  Each dispatcher's cache is therefore wrapped: data files get a ``.sha256``
  sidecar that is checked before Numba unpickles them, and any failing load
  warns, resets the function's index and returns "not cached", so Numba
  recompiles and overwrites the bad entry.  The wrapping happens as soon as
  the dispatcher enables caching (a hook on ``Dispatcher.enable_caching`` that
  only acts on modules being imported by this file), so functions with
  explicit signatures, which compile while the module body runs, are covered.
  These wrappers need Numba's internals (``numba_patches.py``): on a Numba
  version they were not checked on, they are off and Numba's own caching applies.
* Size: the entries are kept under ``$JITGRAPH_CACHE_MAX_BYTES`` (default 4 GiB) by
  evicting the least recently used ones whole (``cache_limit.py``). A store adds its bytes
  to the size recorded in ``<cache>/.usage`` and prunes when that passes the limit (only
  then is the directory scanned); a process never evicts an entry it has loaded, and one
  that another process evicted keeps running from the code it loaded. ``python -m jitgraph
  cache info|clear|prune`` does it by hand (tested in ``tests/test_cache_eviction.py``).
* Limits: only the cache directory and the files in it are checked, not the parents; a
  generated module can only be imported through :meth:`DiskCache.load_module`
  (pickling a dispatcher to another process that did not load it fails).
"""

from __future__ import annotations

import atexit
import errno
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import platform
import shutil
import stat
import sys
import tempfile
import threading
import time
import types
import warnings
from typing import Any

from . import cache_limit, numba_patches
from .state import STATE

__all__ = [
    "FORMAT_VERSION",
    "MODULE_PREFIX",
    "CacheWarning",
    "DiskCache",
    "default_cache_dir",
    "numba_compile_count",
]

#: Version of the jitgraph code generator / cache layout.  Bump it whenever
#: generated code may change meaning without its source text changing (Numba
#: does not notice changes in other files a cached function depends on).
FORMAT_VERSION = "jitgraph-disk-cache-1"

#: Prefix of the module names under which cached modules are imported.
MODULE_PREFIX = "jitgraph_gen_"

_KEY_MARKER = "# jitgraph-cache-key: "

# One lock for all DiskCache instances: they share sys.modules.
_LOCK = threading.RLock()


class CacheWarning(UserWarning):
    """A cache entry or directory was unusable (corrupt or unsafe) and was bypassed."""


def default_cache_dir() -> pathlib.Path:
    """Return ``$JITGRAPH_CACHE_DIR``, else ``$XDG_CACHE_HOME/jitgraph``, else ``~/.cache/jitgraph``."""
    env = os.environ.get("JITGRAPH_CACHE_DIR")
    if env:
        return pathlib.Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative paths are invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        base = pathlib.Path(xdg)
    else:
        base = pathlib.Path.home() / ".cache"
    return base / "jitgraph"


def _current_uid() -> int | None:
    """The uid cache files must belong to (a function so tests can monkeypatch it)."""
    getuid = getattr(os, "getuid", None)
    return getuid() if getuid is not None else None


def unsafe_reason(st: os.stat_result, what: str) -> str | None:
    """Why a file/directory with stat *st* must not be trusted, or None if it is fine."""
    uid = _current_uid()
    if uid is not None and st.st_uid != uid:
        return f"{what} is owned by uid {st.st_uid}, not by the current user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


def numba_target_setting(name: str) -> Any:
    """``numba.core.config.<name>`` for CPU_NAME / CPU_FEATURES (the CPU Numba compiles for;
    None: this machine's) and ENABLE_AVX, read from the environment as Numba reads it where
    Numba is not imported (ENABLE_AVX then as its text, None where unset: its default depends
    on the CPU), so computing a key or a target machine needs no Numba import."""
    config = sys.modules.get("numba.core.config")
    if config is not None and hasattr(config, name):   # not while another thread imports it
        return getattr(config, name)
    value = os.environ.get("NUMBA_" + name)
    if name == "CPU_FEATURES" and value is None and \
            str(os.environ.get("NUMBA_CPU_NAME")).lower() == "generic":
        return ""                       # Numba's default for the generic CPU
    return value


@functools.lru_cache(maxsize=None)
def _machine_key() -> tuple[tuple[str, str], ...]:
    """Everything outside the source that decides whether compiled code is reusable."""
    import llvmlite
    import llvmlite.binding as llvm
    import numpy

    try:
        cpu_name = llvm.get_host_cpu_name()
    except Exception:  # pragma: no cover - platform specific
        cpu_name = "unknown"
    try:
        cpu_features = llvm.get_host_cpu_features().flatten()
    except Exception:  # pragma: no cover - LLVM raises where it cannot tell
        cpu_features = ""
    return (
        ("python", sys.version),
        ("python_cache_tag", str(sys.implementation.cache_tag)),
        ("machine", platform.machine()),
        ("numba", numba_patches.installed_version()),
        ("numpy", numpy.__version__),
        ("llvmlite", llvmlite.__version__),
        ("cpu_name", cpu_name),
        ("cpu_features", cpu_features),
        # Numba compiles for these instead of the host CPU when they are set.
        ("numba_cpu_name", str(numba_target_setting("CPU_NAME"))),
        ("numba_cpu_features", str(numba_target_setting("CPU_FEATURES"))),
    )


def _entry_bytes(source: str, key_extra: str) -> bytes:
    """The exact bytes of a cache file: the source, then one comment line with the key."""
    key = {"format": FORMAT_VERSION, "extra": key_extra, **dict(_machine_key())}
    text = source if source.endswith("\n") else source + "\n"
    # json.dumps escapes newlines, so the key stays one comment line.
    return (text + _KEY_MARKER + json.dumps(key, sort_keys=True) + "\n").encode("utf-8")


class _CorruptNumbaEntry(Exception):
    """A Numba cache data file failed jitgraph's checks."""


def read_private_file(path: str | os.PathLike) -> tuple[str, bytes | None, str]:
    """Read a file of a cache: ``("ok", bytes, "")``, ``("missing"|"unsafe", None, why)``:
    never through a symbolic link, never a file that is not regular or not the user's own."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return "missing", None, ""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "unsafe", None, f"cache entry {str(path)!r} is a symbolic link"
        return "unsafe", None, f"cannot open cache entry {str(path)!r}: {exc}"
    try:
        st = os.fstat(fd)  # the file actually opened, not the name
        if not stat.S_ISREG(st.st_mode):
            return "unsafe", None, f"cache entry {str(path)!r} is not a regular file"
        reason = unsafe_reason(st, f"cache entry {str(path)!r}")
        if reason:
            return "unsafe", None, reason
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    return "ok", data, ""


def seal(magic: bytes, payload: bytes) -> bytes:
    """``payload`` as a cache file of kind ``magic`` holds it: the magic line, the payload's
    SHA-256 in hex and a newline first, so that ``unseal`` tells a damaged or foreign file."""
    return magic + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def unseal(magic: bytes, data: bytes | None) -> bytes | None:
    """The payload ``seal`` wrapped in ``data``; None where ``data`` is missing, of another
    kind or damaged."""
    if data is None or not data.startswith(magic):
        return None
    digest, _, payload = data[len(magic):].partition(b"\n")
    return payload if hashlib.sha256(payload).hexdigest().encode() == digest else None


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write *data* to *path* via a private temp file in the same directory and os.replace.
    A file of the disk cache in use (a native bundle, object code) counts towards its size
    limit."""
    path = os.fspath(path)
    directory, base = os.path.split(path)
    cache = STATE.disk_cache
    if cache is not None and base.endswith((".native", ".o")) and \
            directory == str(cache.directory):
        cache._note_store(len(data))
    fd, tmp = tempfile.mkstemp(prefix="." + base[:24] + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _cleanup_private_tmpdirs() -> None:
    for path in STATE.private_tmpdirs:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_cleanup_private_tmpdirs)


class _VerifiedSourceLoader(importlib.machinery.SourceFileLoader):
    """Executes the bytes that were verified, never re-reads the file or a ``.pyc``.

    Why: between verification and a normal import the file could change, and a
    ``.pyc`` in ``__pycache__`` would bypass the content check.
    """

    def __init__(self, fullname: str, path: str, data: bytes) -> None:
        super().__init__(fullname, path)
        self._verified = data

    def get_data(self, path: str) -> bytes:
        if os.path.abspath(path) == os.path.abspath(self.path):
            return self._verified
        return super().get_data(path)

    def get_code(self, fullname: str) -> types.CodeType:
        return self.source_to_code(self._verified, self.path)


def _import_verified(modname: str, path: pathlib.Path, data: bytes) -> types.ModuleType:
    """Import *data* as module *modname* backed by file *path* (registered before exec)."""
    loader = _VerifiedSourceLoader(modname, str(path), data)
    spec = importlib.util.spec_from_file_location(modname, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    # Numba re-imports the module by name when it rebuilds a cached function,
    # so it has to be in sys.modules while the module body runs.
    sys.modules[modname] = module
    try:
        loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def on_enable_caching(disp: Any) -> None:
    """Run the guard of the generated module *disp* belongs to, while that module executes.

    Why: ``@njit(signature, cache=True)`` loads from Numba's cache inside the
    decorator, before the module body finishes; every other function costs one
    dict lookup."""
    hook = STATE.caching_hooks.get(getattr(disp.py_func, "__module__", None))
    if hook is not None:
        hook(disp)
    elif STATE.helper_guard is not None:     # the kernels' helpers (``helper_cache``)
        STATE.helper_guard(disp)


def _iter_dispatchers(module: types.ModuleType):
    """Numba dispatchers defined by *module* itself (not ones it imported)."""
    from numba.core.dispatcher import Dispatcher

    seen: set[int] = set()
    for obj in list(vars(module).values()):
        if not isinstance(obj, Dispatcher) or id(obj) in seen:
            continue
        if getattr(obj.py_func, "__module__", None) != module.__name__:
            continue
        seen.add(id(obj))
        yield obj


def numba_compile_count(module: types.ModuleType) -> int:
    """How many times the module's dispatchers really compiled (not loaded from Numba's cache).

    Why it is reliable: in numba 0.68 ``Dispatcher.compile`` first asks its
    cache (``dispatcher.stats.cache_hits[sig] += 1`` on a load) and only then
    compiles (``dispatcher.stats.cache_misses[sig] += 1``).  The miss counter is
    incremented for every compilation, with or without ``cache=True``.
    """
    return sum(sum(d.stats.cache_misses.values()) for d in _iter_dispatchers(module))


def _check_numba_dir(cache_path: str | os.PathLike, stem: str) -> str | None:
    """Check Numba's cache directory and the files in it that belong to module file *stem*."""
    try:
        st = os.stat(cache_path)
    except FileNotFoundError:
        return None
    reason = unsafe_reason(st, f"Numba cache directory {os.fspath(cache_path)!r}")
    if reason:
        return reason
    prefix = stem + "."
    try:
        entries = list(os.scandir(cache_path))
    except OSError as exc:
        return f"cannot list Numba cache directory {os.fspath(cache_path)!r}: {exc}"
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            est = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(est.st_mode):
            return f"Numba cache file {entry.path!r} is not a regular file"
        reason = unsafe_reason(est, f"Numba cache file {entry.path!r}")
        if reason:
            return reason
    return None


def _predicted_numba_cache_dir(py_file: pathlib.Path) -> pathlib.Path:
    """Where Numba will put the cache files of functions defined in *py_file*."""
    from numba.core import caching, config

    # Numba reads NUMBA_CACHE_DIR again at each compile (a variable set or removed since its
    # last compile counts): read it the same way, or the files checked are not those it loads
    config.reload_config()
    if config.CACHE_DIR:
        locator = caching.UserProvidedCacheLocator
        return pathlib.Path(config.CACHE_DIR) / locator.get_suitable_cache_subpath(str(py_file))
    return py_file.parent / "__pycache__"


class DiskCache:
    """Content-addressed directory of generated modules whose ``cache=True`` functions Numba caches.

    ``stats`` counts ``disk_hits`` (valid entry imported), ``disk_misses`` (no
    usable entry: missing, corrupt or unsafe), ``rejected`` (corrupt or unsafe
    ``.py`` entries, unsafe directories, unreadable Numba cache entries),
    ``writes`` (entries written) and ``memory_hits`` (module already imported
    in this process).

    ``max_bytes`` limits the size of the entries (None: ``$JITGRAPH_CACHE_MAX_BYTES``, else
    4 GiB; 0 there means no limit): see :meth:`prune`.
    """

    def __init__(self, directory: str | os.PathLike | None = None,
                 max_bytes: int | None = None) -> None:
        self.directory = pathlib.Path(directory) if directory is not None else default_cache_dir()
        self.directory = self.directory.expanduser().absolute()
        self.max_bytes = max_bytes
        self._pending = 0      # bytes stored and not yet added to the usage record
        self._floor = 0        # what the last prune could not evict (entries in use), plus slack
        self._pinned: set[str] = set()      # entries run from a native bundle by this process
        self.stats: dict[str, int] = {
            "disk_hits": 0,
            "disk_misses": 0,
            "rejected": 0,
            "writes": 0,
            "memory_hits": 0,
        }
        self._stats_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DiskCache({str(self.directory)!r})"

    # -- size limit ----------------------------------------------------------

    def limit(self) -> int | None:
        """The limit in force in bytes (None: no limit)."""
        if self.max_bytes is not None:
            return self.max_bytes if self.max_bytes > 0 else None
        return cache_limit.max_bytes_from_env()

    def entries(self) -> list[cache_limit.CacheEntry]:
        """The entries on disk, least recently used first."""
        return cache_limit.scan(self.directory)

    def usage(self, exact: bool = True) -> dict[str, Any]:
        """``directory``, ``bytes`` and ``entries`` on disk now, and the ``limit`` in force.
        ``exact=False`` reads the recorded size instead of scanning (``entries``: None)."""
        recorded = None if exact else cache_limit.recorded_usage(self.directory)
        if recorded is not None:
            return {"directory": str(self.directory), "bytes": recorded, "entries": None,
                    "limit": self.limit()}
        entries = self.entries()
        return {"directory": str(self.directory), "bytes": sum(e.size for e in entries),
                "entries": len(entries), "limit": self.limit()}

    def in_use(self) -> set[str]:
        """Digests of the entries this process loaded (imported modules, native bundles run):
        this process never evicts them."""
        n = len(MODULE_PREFIX)
        return {name[n:] for name in list(sys.modules) if name.startswith(MODULE_PREFIX)} | self._pinned

    def prune(self, max_bytes: int | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Evict least recently used entries until the rest fit in 90 % of the limit
        (*max_bytes*, else :meth:`limit`), never one :meth:`in_use`. Waits up to *timeout* s
        for another pruner or loader; ``busy`` in the result says it gave up, ``unsafe`` why
        a directory that is not safe to use was left alone."""
        limit = max_bytes if max_bytes is not None else self.limit()
        result = {"evicted": 0, "freed": 0, "busy": False, "unsafe": None}
        try:
            st = os.stat(self.directory)
        except FileNotFoundError:
            return {**result, "bytes": 0, "entries": 0, "limit": limit}
        result["unsafe"] = (unsafe_reason(st, f"cache directory {str(self.directory)!r}")
                            if stat.S_ISDIR(st.st_mode) else "it is not a directory")
        if result["unsafe"]:
            return {**result, "bytes": 0, "entries": 0, "limit": limit}
        with cache_limit.DirectoryLock(self.directory, exclusive=True) as lock:
            if not lock.acquire(timeout):
                return {**result, "busy": True, "bytes": None, "entries": None, "limit": limit}
            entries = cache_limit.scan(self.directory, remove_stale_temps=True)
            victims = [] if limit is None else cache_limit.select_victims(entries, limit, self.in_use())
            for e in victims:
                result["freed"] += cache_limit.evict(e)
            result["freed"] += cache_limit.remove_old_helpers(
                self.directory, STATE.fingerprint,
                0.0 if limit == 0 else cache_limit.STALE_HELPERS_SECONDS)
            result["evicted"] = len(victims)
            left = sum(e.size for e in entries) - sum(e.size for e in victims)
            cache_limit.set_usage(self.directory, left)
        with self._stats_lock:
            # entries in use may keep the cache over its limit: prune again only after
            # another tenth of the limit was stored, not at every store
            target = int(limit * cache_limit.LOW_WATER) if limit else 0
            self._floor = left + (limit - target) if limit and left > target else 0
        return {**result, "bytes": left, "entries": len(entries) - len(victims), "limit": limit}

    def clear(self, timeout: float = 30.0) -> dict[str, Any]:
        """Evict every entry (except those :meth:`in_use`): like :meth:`prune` with limit 0."""
        return self.prune(max_bytes=0, timeout=timeout)

    def _touch(self, path: pathlib.Path) -> None:
        """Mark an entry used: its access time now, its modification time unchanged (Numba's
        index records it)."""
        try:
            st = os.stat(path)
            os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
        except OSError:
            pass

    def _note_store(self, nbytes: int) -> None:
        """Count bytes this process wrote into the cache directory (see :meth:`_maybe_prune`)."""
        with self._stats_lock:
            self._pending += nbytes

    def _maybe_prune(self) -> None:
        """Add what was stored to the usage record; prune, without waiting, where that takes
        it over the limit or there is no record yet."""
        limit = self.limit()
        with self._stats_lock:
            pending, self._pending = self._pending, 0
        if not pending or limit is None:
            return
        try:
            total = cache_limit.add_usage(self.directory, pending)
            if total is None or total > max(limit, self._floor):
                self.prune(timeout=0.0)   # busy: the next store tries again
        except Exception as exc:          # a full disk, a removed directory: compiling goes on
            warnings.warn(CacheWarning(f"cannot keep the cache {str(self.directory)!r} under "
                                       f"its size limit ({type(exc).__name__}: {exc})"),
                          stacklevel=3)

    # -- public API -------------------------------------------------------

    def entry_name(self, source: str, key_extra: str = "") -> str:
        """The hex digest naming the entry for (*source*, *key_extra*) on this machine."""
        return hashlib.sha256(_entry_bytes(source, key_extra)).hexdigest()

    def load_module(self, source: str, key_extra: str = "") -> tuple[types.ModuleType, bool]:
        """Return ``(module, was_on_disk)`` for generated *source*.

        The file name is the SHA-256 of the source plus the cache key
        (*key_extra*, :data:`FORMAT_VERSION`, Python/NumPy/Numba/llvmlite
        versions, CPU name and features).  ``was_on_disk`` is True when a valid
        entry already existed in this cache directory (also for a module this
        process imported before from this directory), False when the entry had
        to be written or the module was built in a private temporary directory.
        """
        data = _entry_bytes(source, key_extra)
        digest = hashlib.sha256(data).hexdigest()
        modname = MODULE_PREFIX + digest
        with _LOCK:
            module = sys.modules.get(modname)
            if module is not None:
                self.stats["memory_hits"] += 1
                file = getattr(module, "__file__", None)
                return module, bool(file) and pathlib.Path(file).parent == self.directory
            loaded = self._load_from_disk(modname, digest, data)
        if not loaded[1]:
            self._maybe_prune()
        return loaded

    # -- internals ----------------------------------------------------------

    def _warn(self, message: str) -> None:
        with self._stats_lock:
            self.stats["rejected"] += 1
        warnings.warn(CacheWarning(message), stacklevel=4)

    def ensure_directory(self) -> str | None:
        """Create the cache directory (mode 0700) and its ``__pycache__``; return why it is unsafe."""
        d = self.directory
        try:
            try:
                os.mkdir(d, 0o700)
            except FileNotFoundError:
                os.makedirs(d.parent, exist_ok=True)
                os.mkdir(d, 0o700)
            os.chmod(d, 0o700)  # the umask may have removed bits; be exact
        except FileExistsError:
            pass
        except OSError as exc:
            return f"cannot create cache directory {str(d)!r}: {exc}"
        try:
            st = os.stat(d)
        except OSError as exc:
            return f"cannot stat cache directory {str(d)!r}: {exc}"
        if not stat.S_ISDIR(st.st_mode):
            return f"cache directory {str(d)!r} is not a directory"
        reason = unsafe_reason(st, f"cache directory {str(d)!r}")
        if reason:
            return reason
        # Pre-create Numba's in-tree cache directory privately (Numba itself
        # would use the umask default, typically 0755).
        try:
            os.mkdir(d / "__pycache__", 0o700)
        except FileExistsError:
            pass
        except OSError:
            pass  # Numba then picks another locator; checked after import
        return None

    def entry_status(self, digest: str) -> str:
        """``"ok"`` where the entry ``digest`` is on disk, safe and intact; else ``"missing"``,
        ``"corrupt"`` or ``"unsafe"`` (nothing is warned, written or imported). The directory
        itself is checked by :meth:`read_trusted` and :meth:`load_module`. An intact entry
        counts as used by this process (it is run from a native bundle): see :meth:`in_use`."""
        path = self.directory / f"{digest}.py"
        status = self._read_entry(path, digest)[0]
        if status == "ok":
            self._pinned.add(digest)
            self._touch(path)
        return status

    def read_trusted(self, path: pathlib.Path) -> bytes | None:
        """The bytes of a file of this cache (a native bundle) where the directory and the
        file are safe to execute from; None where it is missing or unsafe (with a warning)."""
        reason = self.ensure_directory()
        status, data, why = ("unsafe", None, reason) if reason else read_private_file(path)
        if status == "unsafe":
            self._warn(f"{why}; not using it")
        if data is not None:
            self._pinned.add(path.name.split(".", 1)[0])
            self._touch(path)
        return data

    def _read_entry(self, path: pathlib.Path, digest: str) -> tuple[str, bytes | None, str]:
        """Read and verify an entry: ``("ok", bytes, "")``, ``("missing"|"corrupt"|"unsafe", None, why)``."""
        status, data, why = read_private_file(path)
        if data is None:
            return status, data, why
        if hashlib.sha256(data).hexdigest() != digest:
            return "corrupt", None, (
                f"cache entry {str(path)!r} does not match its hash "
                f"({len(data)} bytes; truncated or modified)"
            )
        return "ok", data, ""

    def _write_entry(self, path: pathlib.Path, data: bytes) -> None:
        """Atomically write *data* to *path*: private temp file in the same dir, then os.replace."""
        atomic_write(path, data)
        self.stats["writes"] += 1
        if path.parent == self.directory:
            self._note_store(len(data))

    def _load_from_disk(self, modname: str, digest: str, data: bytes) -> tuple[types.ModuleType, bool]:
        reason = self.ensure_directory()
        if reason:
            self.stats["disk_misses"] += 1
            self._warn(f"{reason}; compiling {modname} in a private temporary directory instead")
            return self._load_private(modname, digest, data), False
        # shared with other loaders, exclusive for pruners: the entry cannot vanish between
        # being read and Numba locating its file (a stuck pruner costs at most 30 s)
        with cache_limit.DirectoryLock(self.directory, exclusive=False) as lock:
            if not lock.acquire(timeout=30.0):
                self.stats["disk_misses"] += 1
                self._warn(f"cache directory {str(self.directory)!r} is locked by a pruner for "
                           f"over 30 s; compiling {modname} in a private temporary directory")
                return self._load_private(modname, digest, data), False
            return self._load_entry(modname, digest, data)

    def _load_entry(self, modname: str, digest: str, data: bytes) -> tuple[types.ModuleType, bool]:
        path = self.directory / f"{digest}.py"
        status, verified, why = self._read_entry(path, digest)
        if status == "unsafe":
            self.stats["disk_misses"] += 1
            self._warn(f"{why}; refusing to import it, compiling in a private temporary directory instead")
            return self._load_private(modname, digest, data), False

        numba_dir = _predicted_numba_cache_dir(path)
        reason = _check_numba_dir(numba_dir, digest)
        if reason:
            self.stats["disk_misses"] += 1
            self._warn(f"{reason}; compiling {modname} in a private temporary directory instead")
            return self._load_private(modname, digest, data), False

        if status == "ok":
            assert verified is not None
            self.stats["disk_hits"] += 1
            self._touch(path)
            return self._import(modname, path, verified), True

        self.stats["disk_misses"] += 1
        if status == "corrupt":
            self._warn(f"{why}; discarding and rewriting it")
        try:
            self._write_entry(path, data)
        except OSError as exc:
            self._warn(f"cannot write cache entry {str(path)!r}: {exc}; "
                       "compiling in a private temporary directory instead")
            return self._load_private(modname, digest, data), False
        # Execute the bytes we wrote, not what is on disk now.
        return self._import(modname, path, data), False

    def _load_private(self, modname: str, digest: str, data: bytes) -> types.ModuleType:
        """Fallback: write the module into a fresh 0700 temporary directory and import it from there.

        Why a file and not ``exec``: ``cache=True`` raises for functions without
        a source file.  The directory lives until the process exits.
        """
        tmpdir = tempfile.mkdtemp(prefix="jitgraph-private-")  # mode 0700
        STATE.private_tmpdirs.append(tmpdir)
        path = pathlib.Path(tmpdir) / f"{digest}.py"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.mkdir(pathlib.Path(tmpdir) / "__pycache__", 0o700)
        return self._import(modname, path, data)

    def _import(self, modname: str, path: pathlib.Path, data: bytes) -> types.ModuleType:
        checked = {os.path.abspath(_predicted_numba_cache_dir(path))}

        def guard(disp: Any) -> None:
            self.guard_dispatcher(disp, path.stem, checked)

        # Dispatchers with explicit signatures compile (or load from Numba's
        # cache) while the module body runs, so guard them as they are created.
        hooked = numba_patches.install_enable_caching_hook(on_enable_caching)
        if hooked:
            STATE.caching_hooks[modname] = guard
        try:
            module = _import_verified(modname, path, data)
        finally:
            STATE.caching_hooks.pop(modname, None)
        for disp in _iter_dispatchers(module):  # idempotent; covers a missing hook
            guard(disp)
        return module

    def guard_dispatcher(self, disp: Any, stem: str, checked: set[str]) -> None:
        """Make one dispatcher's Numba cache refuse unsafe files and survive corrupt ones."""
        cache = numba_patches.dispatcher_cache(disp)
        if cache is None or numba_patches.is_guarded(cache):
            return  # cache=False (nothing read from disk), fast paths off, or already done
        cache_path = os.path.abspath(cache.cache_path)
        if cache_path not in checked:
            # Numba chose another location (NUMBA_CACHE_DIR, unwritable __pycache__...).
            reason = _check_numba_dir(cache_path, stem)
            if reason:
                cache.disable()
                numba_patches.mark_guarded(cache)
                self._warn(f"{reason}; Numba caching disabled for {disp.py_func.__qualname__}")
                return
            checked.add(cache_path)
        self._wrap_cache(cache, f"{disp.py_func.__module__}.{disp.py_func.__qualname__}")

    def _wrap_cache(self, cache: Any, what: str) -> None:
        """Make Numba cache errors mean "recompile", and bind Numba's data files to their keys.

        What Numba 0.68.1 does by itself with a damaged ``.nbi``/``.nbc``: the
        exception from ``pickle`` (EOFError, UnpicklingError,
        UnicodeDecodeError...) or LLVM (RuntimeError: bitcode parsing error)
        propagates out of the first call of the function; and bytes changed
        inside the cached *object code* are not detected at all (the process
        executed them and died with SIGTRAP in our experiment).  Hence:

        * index updates hold a file lock (``numba_patches.guard_cache``): two processes saving
          overloads of one function at once cannot cross the index and the data files;
        * every data file gets a ``<data file>.sha256`` sidecar: the SHA-256 of the file's
          name, its index key (argument types, target CPU, the function's bytecode) and its
          bytes, written after Numba saved it and checked before Numba unpickles it; a
          missing sidecar reads as "not cached", a mismatch (damaged, or copied from another
          entry) is refused;
        * any exception while loading warns once, drops that signature from the index and
          returns "not cached", so Numba recompiles and overwrites the entry;
        * a loaded entry must be for the requested argument types.
        """
        from numba.core import sigutils

        owner = self

        def verify(path: str, key: str, payload: bytes) -> None:
            # FileNotFoundError is an OSError: Numba then treats the entry as absent.
            with open(path + ".sha256", "rb") as f:
                expected = f.read().strip()
            if _sealed_digest(path, key, payload) != expected:
                raise _CorruptNumbaEntry(
                    f"{os.path.basename(path)} does not match its .sha256 checksum "
                    "(damaged, or copied from another entry)")

        def seal(path: str, key: str, payload: bytes) -> None:
            atomic_write(path + ".sha256", _sealed_digest(path, key, payload) + b"\n")
            if os.path.dirname(os.path.dirname(path)) == str(owner.directory):
                owner._note_store(len(payload) + 2048)  # with the sidecar and index, roughly

        def load_overload(load: Any, sig: Any, target_context: Any, discard: Any) -> Any:
            try:
                cres = load(sig, target_context)
                if cres is not None:
                    args, _ = sigutils.normalize_signature(sig)
                    if tuple(cres.signature.args) != tuple(args):
                        raise _CorruptNumbaEntry(
                            f"entry for {cres.signature.args} returned for {tuple(args)}")
                return cres
            except Exception as exc:
                # Not _LOCK: this runs under Numba's compiler lock, and a thread holding
                # _LOCK may be waiting for that lock (eager compilation).
                with owner._stats_lock:
                    owner.stats["rejected"] += 1
                warnings.warn(
                    CacheWarning(
                        f"unreadable Numba cache entry for {what} in "
                        f"{cache.cache_path!r} ({type(exc).__name__}: {exc}); recompiling"
                    ),
                    stacklevel=3,
                )
                try:
                    discard()   # the signature leaves the index: the bad file is overwritten
                except Exception:
                    cache.disable()
                return None

        def save_overload(save: Any, sig: Any, data: Any) -> None:
            try:
                save(sig, data)
            except Exception as exc:
                warnings.warn(
                    CacheWarning(
                        f"cannot save Numba cache entry for {what} in "
                        f"{cache.cache_path!r} ({type(exc).__name__}: {exc})"
                    ),
                    stacklevel=3,
                )
            owner._maybe_prune()

        numba_patches.guard_cache(cache, verify, seal, load_overload, save_overload)


def _sealed_digest(path: str, key: str, payload: bytes) -> bytes:
    """The checksum a Numba data file's sidecar holds: its name, its index key and its bytes,
    so a file damaged, or copied with its sidecar from another entry, is refused."""
    h = hashlib.sha256(b"jitgraph-numba-entry-2\0")
    h.update(os.path.basename(path).encode() + b"\0" + key.encode() + b"\0")
    h.update(payload)
    return h.hexdigest().encode()


# a fork waits until no thread is loading an entry (this lock is never taken under Numba's)
numba_patches.hold_across_fork(_LOCK)
