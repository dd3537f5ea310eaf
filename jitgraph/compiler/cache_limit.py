"""The disk cache's size limit: what an entry is on disk, when it was last used, the lock
pruners and loaders share, and least-recently-used eviction of whole entries.

Why a limit: every program compiled adds its generated modules, Numba's machine code and a
native bundle to the cache directory, and nothing else ever removes them.

* An entry is every file named ``<sha256>.*`` in the cache directory and in its
  ``__pycache__`` (the module ``.py``, its ``.native`` bundle, a loop kernel's ``.o``
  object code, Numba's ``.nbi`` index,
  ``.nbc`` data and their ``.sha256`` sidecars). Entries are evicted whole; the files of
  the cache that are not entries (``.lock``, the profiler's ``peaks/``) are left alone.
* Last use is the newest access or modification time of an entry's files. A load sets the
  access time of the entry's ``.py`` explicitly (its modification time must not change:
  Numba's index records it and would treat the entry as stale), so relatime or noatime
  mounts do not matter.
* What the entries weigh is recorded in ``<cache>/.usage`` (bytes, one line): every store
  adds its bytes under a lock of that file, and a prune writes what it measured. A store
  therefore costs one small locked read-and-write, and only a store that takes the record
  over the limit (or finds no record) scans the directory: a full cache holds 100 000
  files, a scan of 14 000 took 0.26 s here. The record drifts where files are removed by
  hand or a process dies between writing and recording; each prune corrects it.
* Pruners hold ``<cache>/.lock`` exclusively (``fcntl.flock``); a process importing an
  entry holds it shared, so an entry never disappears between being read and Numba
  locating its file. Where ``fcntl`` is missing, pruners exclude each other with an
  ``O_EXCL`` lock file and loads take no lock. Eviction unlinks the index first, then
  the data, then the module, so a reader sees either an entry, a missing index (Numba
  compiles again) or nothing.
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["DEFAULT_MAX_BYTES", "ENV_MAX_BYTES", "CacheEntry", "DirectoryLock", "add_usage",
           "evict", "max_bytes_from_env", "parse_size", "recorded_usage", "remove_old_helpers",
           "scan", "select_victims", "set_usage"]

#: The default limit of the cache directory's entries: 4 GiB.
DEFAULT_MAX_BYTES = 4 << 30
ENV_MAX_BYTES = "JITGRAPH_CACHE_MAX_BYTES"
#: Pruning stops at this fraction of the limit, so the next store does not prune again.
LOW_WATER = 0.9
#: A writer's temporary file (``.<name>.<random>.tmp``) older than this is left over from
#: a killed process and is removed by a prune.
STALE_TEMP_SECONDS = 3600.0
#: The kernels' helpers of another version of jitgraph's code (``helpers/<fingerprint>``)
#: unused for this long are removed by a prune (by any clear).
STALE_HELPERS_SECONDS = 86400.0
HELPERS_NAME = "helpers"
LOCK_NAME = ".lock"
USAGE_NAME = ".usage"
_FALLBACK_LOCK = ".prune.lock"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# the order files of an entry are removed in (see the module docstring)
_ORDER = {".nbi": 0, ".nbc": 1, ".sha256": 1, ".native": 2, ".o": 2, ".py": 3}


def parse_size(text: str) -> int:
    """Bytes from ``"1073741824"``, ``"512M"``, ``"4GiB"``, ``"2g"`` (K/M/G/T are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if m is None:
        raise ValueError(f"{ENV_MAX_BYTES}={text!r} is not a size: give bytes or a number with "
                         "a K, M, G or T suffix (for example 4G), or 0 for no limit")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def max_bytes_from_env() -> int | None:
    """The limit in force: ``$JITGRAPH_CACHE_MAX_BYTES`` (0: none), else :data:`DEFAULT_MAX_BYTES`."""
    text = os.environ.get(ENV_MAX_BYTES, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    limit = parse_size(text)
    return limit if limit > 0 else None


@dataclass
class CacheEntry:
    """One entry of the cache directory: its files, their total size and its last use."""
    digest: str
    files: list = field(default_factory=list)
    size: int = 0
    last_used: float = 0.0


def _files(directory: str) -> Iterator[os.DirEntry]:
    try:
        with os.scandir(directory) as it:
            yield from it
    except FileNotFoundError:
        return


def scan(directory: str | os.PathLike, remove_stale_temps: bool = False) -> list[CacheEntry]:
    """The entries of the cache *directory* (and of its ``__pycache__``), oldest use first."""
    directory = os.fspath(directory)
    entries: dict[str, CacheEntry] = {}
    now = time.time()
    for folder in (directory, os.path.join(directory, "__pycache__")):
        for f in _files(folder):
            try:
                st = f.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            # a writer's temporary: ours (.<name>.<random>.tmp) or Numba's (<name>.tmp.<hex>)
            if (f.name.endswith(".tmp") and f.name.startswith(".")) or ".tmp." in f.name:
                if remove_stale_temps and now - st.st_mtime > STALE_TEMP_SECONDS:
                    with contextlib.suppress(OSError):
                        os.unlink(f.path)
                continue
            digest = f.name.split(".", 1)[0]
            if not _DIGEST.match(digest) or not f.is_file(follow_symlinks=False):
                continue
            e = entries.setdefault(digest, CacheEntry(digest))
            e.files.append(f.path)
            e.size += st.st_size
            e.last_used = max(e.last_used, st.st_atime, st.st_mtime)
    return sorted(entries.values(), key=lambda e: (e.last_used, e.digest))


def select_victims(entries: list[CacheEntry], limit: int, keep: Iterable[str] = ()) -> list[CacheEntry]:
    """The least recently used entries to evict so the rest fit in :data:`LOW_WATER` of
    *limit*, never one named in *keep*; nothing when they already fit in *limit*."""
    total = sum(e.size for e in entries)
    if total <= limit:
        return []
    keep = set(keep)
    target = int(limit * LOW_WATER)
    victims = []
    for e in entries:           # oldest first
        if total <= target:
            break
        if e.digest in keep:
            continue
        victims.append(e)
        total -= e.size
    return victims


def remove_old_helpers(directory: str | os.PathLike, current: str | None,
                       older_than: float) -> int:
    """Remove the helpers' folders (``helpers/<fingerprint>``, see ``helper_cache``) of code
    versions other than *current* whose newest file is older than *older_than* seconds;
    returns the bytes freed. A process still running such a version recompiles what it
    misses (a missing file only means "not cached")."""
    import shutil
    root = os.path.join(os.fspath(directory), HELPERS_NAME)
    freed, now = 0, time.time()
    for d in _files(root):
        if d.name == current or not d.is_dir(follow_symlinks=False):
            continue
        newest, size = 0.0, 0
        for folder, _, files in os.walk(d.path):
            for name in files:
                try:
                    st = os.stat(os.path.join(folder, name), follow_symlinks=False)
                except FileNotFoundError:
                    continue
                newest, size = max(newest, st.st_atime, st.st_mtime), size + st.st_size
        if now - newest >= older_than:
            shutil.rmtree(d.path, ignore_errors=True)
            freed += size
    return freed


def evict(entry: CacheEntry) -> int:
    """Remove one entry's files (index, data, bundle, module: see the module docstring);
    returns the bytes freed. Files another process removed already are skipped."""
    freed = 0
    for path in sorted(entry.files, key=lambda p: _ORDER.get(os.path.splitext(p)[1], 1)):
        try:
            size = os.stat(path, follow_symlinks=False).st_size
            os.unlink(path)
        except FileNotFoundError:
            continue
        freed += size
    return freed


@contextlib.contextmanager
def _usage_file(directory: str | os.PathLike) -> Iterator[int]:
    """The open ``.usage`` record, locked exclusively (a few microseconds) where fcntl exists."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(os.path.join(os.fspath(directory), USAGE_NAME), flags, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _read_record(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        return int(os.read(fd, 64).decode("ascii").strip())
    except (ValueError, UnicodeDecodeError):
        return None


def _write_record(fd: int, total: int) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, b"%d\n" % max(total, 0))


def add_usage(directory: str | os.PathLike, nbytes: int) -> int | None:
    """Add *nbytes* to the recorded size of the entries; the new total, or None where there
    is no record yet (the caller scans and :func:`set_usage`)."""
    with _usage_file(directory) as fd:
        total = _read_record(fd)
        if total is None:
            return None
        _write_record(fd, total + nbytes)
        return total + nbytes


def set_usage(directory: str | os.PathLike, total: int) -> None:
    """Record the size of the entries a scan measured."""
    with _usage_file(directory) as fd:
        _write_record(fd, total)


def recorded_usage(directory: str | os.PathLike) -> int | None:
    """The recorded size of the entries (no scan), None where there is no record."""
    try:
        with open(os.path.join(os.fspath(directory), USAGE_NAME), "rb") as f:
            return int(f.read(64).decode("ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


class DirectoryLock:
    """``<cache>/.lock``: held exclusively by a pruner, shared by a process importing an entry.

    ``acquire(timeout)`` polls (no blocking call, so a stuck holder costs at most *timeout*
    seconds) and returns whether the lock is held. Each lock opens its own file description,
    so two threads of one process exclude each other as two processes do."""

    def __init__(self, directory: str | os.PathLike, exclusive: bool) -> None:
        self.directory = os.fspath(directory)
        self.exclusive = exclusive
        self._fd: int | None = None
        self._fallback: str | None = None

    def acquire(self, timeout: float = 0.0) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._try():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def _try(self) -> bool:
        if fcntl is None:           # pragma: no cover - not on POSIX
            return self._try_fallback()
        if self._fd is None:
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            try:
                self._fd = os.open(os.path.join(self.directory, LOCK_NAME), flags, 0o600)
            except OSError:
                return False
        mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(self._fd, mode | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def _try_fallback(self) -> bool:  # pragma: no cover - not on POSIX
        if not self.exclusive:
            return True
        path = os.path.join(self.directory, _FALLBACK_LOCK)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - os.stat(path).st_mtime > 600:   # left by a killed pruner
                    os.unlink(path)
            return False
        except OSError:
            return False
        os.close(fd)
        self._fallback = path
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)      # closing the description releases the flock
            self._fd = None
        if self._fallback is not None:  # pragma: no cover - not on POSIX
            with contextlib.suppress(OSError):
                os.unlink(self._fallback)
            self._fallback = None

    def __enter__(self) -> "DirectoryLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
