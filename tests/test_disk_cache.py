"""Tests for jitgraph.compiler.disk_cache: the on-disk cache of generated Numba modules.

Subprocess tests are needed because Numba's cache is only observable across
processes (a process never reloads its own compiled functions).  Each
subprocess costs about 1 s (``import numba`` + a small compile), so they are
batched: one child handles several modules.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import pathlib
import stat
import subprocess
import sys
import textwrap
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
MODULE_FILE = REPO / "jitgraph" / "compiler" / "disk_cache.py"


def _import_disk_cache():
    """Import the module normally, or by file path while the package has no __init__ yet."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        return importlib.import_module("jitgraph.compiler.disk_cache")
    except ImportError:
        name = "_jitgraph_disk_cache_under_test"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, MODULE_FILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


dc = _import_disk_cache()


def make_source(mult: int, token: str | None = None, name: str = "kern", signature: str = "") -> str:
    """A small generated module; *token* makes the source (and module) unique per test.

    With *signature* the function is compiled eagerly, i.e. while the module is imported.
    """
    token = token or uuid.uuid4().hex
    sig = f"{signature!r}, " if signature else ""
    return textwrap.dedent(
        f"""\
        # token {token}
        import sys
        import numba

        REGISTERED_BEFORE_EXEC = __name__ in sys.modules
        LOADED_FROM = __file__


        @numba.njit({sig}cache=True)
        def {name}(x):
            return x * {mult} + 1
        """
    )


def entry_files(directory: pathlib.Path) -> list[pathlib.Path]:
    """The files of *directory*, without the lock and the usage record of the size limit."""
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name not in (".lock", ".usage"))


def forget(module) -> None:
    """Drop a generated module from sys.modules so the next load goes to disk."""
    sys.modules.pop(module.__name__, None)


# --------------------------------------------------------------------------
# Pure Python behaviour (no Numba compilation)
# --------------------------------------------------------------------------


def test_default_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert dc.default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("JITGRAPH_CACHE_DIR")
    assert dc.default_cache_dir() == tmp_path / "xdg" / "jitgraph"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert dc.default_cache_dir() == tmp_path / "home" / ".cache" / "jitgraph"
    assert dc.DiskCache().directory == tmp_path / "home" / ".cache" / "jitgraph"


def test_entry_is_content_addressed_and_registered_before_exec(tmp_path):
    cache_dir = tmp_path / "a" / "b" / "cache"  # parents do not exist yet
    cache = dc.DiskCache(cache_dir)
    source = make_source(2)
    module, was_on_disk = cache.load_module(source)
    try:
        assert was_on_disk is False
        [entry] = entry_files(cache_dir)
        digest = entry.stem
        assert entry.name == f"{digest}.py"
        # The file's content hashes to its name and starts with the source unchanged.
        data = entry.read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest
        assert data.decode().startswith(source)
        assert module.__name__ == f"{dc.MODULE_PREFIX}{digest}"
        assert sys.modules[module.__name__] is module
        assert module.REGISTERED_BEFORE_EXEC is True
        assert pathlib.Path(module.LOADED_FROM) == entry
        # Line numbers of the generated code are preserved (key is a trailer).
        assert module.kern.py_func.__code__.co_firstlineno == source.splitlines().index(
            "@numba.njit(cache=True)") + 1
        # Private permissions: directory 0700, Numba's __pycache__ 0700, entry 0600.
        assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((cache_dir / "__pycache__").stat().st_mode) == 0o700
        assert stat.S_IMODE(entry.stat().st_mode) & 0o077 == 0

        # Same process: the module object is reused, nothing is read or written.
        again, was_on_disk = cache.load_module(source)
        assert again is module and was_on_disk is True
        assert cache.stats == {"disk_hits": 0, "disk_misses": 1, "rejected": 0,
                               "writes": 1, "memory_hits": 1}

        # A fresh import (as in a new process) finds the entry on disk.
        forget(module)
        fresh = dc.DiskCache(cache_dir)
        module2, was_on_disk = fresh.load_module(source)
        assert was_on_disk is True and module2 is not module
        assert fresh.stats["disk_hits"] == 1 and fresh.stats["writes"] == 0
        assert len(entry_files(cache_dir)) == 1
        forget(module2)
    finally:
        forget(module)


def test_key_covers_key_extra_and_format_version(tmp_path, monkeypatch):
    cache = dc.DiskCache(tmp_path)
    source = make_source(3)
    names = {cache.entry_name(source), cache.entry_name(source, key_extra="float32")}
    monkeypatch.setattr(dc, "FORMAT_VERSION", "jitgraph-disk-cache-test")
    names.add(cache.entry_name(source))
    assert len(names) == 3
    trailer = dc._entry_bytes(source, "a\nb").decode().splitlines()[-1]
    assert trailer.startswith("# jitgraph-cache-key: ")
    key = json.loads(trailer.split(": ", 1)[1])
    for field in ("numba", "numpy", "llvmlite", "python", "cpu_name", "cpu_features"):
        assert key[field]
    assert key["extra"] == "a\nb"


def test_writes_are_atomic_temp_file_then_replace(tmp_path, monkeypatch):
    cache = dc.DiskCache(tmp_path)
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((pathlib.Path(src), pathlib.Path(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(dc.os, "replace", spy)
    module, _ = cache.load_module(make_source(4))
    forget(module)
    [(src, dst)] = calls
    assert src.parent == dst.parent == tmp_path and dst.suffix == ".py"
    assert [p.name for p in entry_files(tmp_path)] == [dst.name]  # no temp file left


def test_failed_write_leaves_nothing_and_falls_back(tmp_path, monkeypatch):
    cache = dc.DiskCache(tmp_path)

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dc.os, "replace", fail)
    with pytest.warns(dc.CacheWarning, match="cannot write cache entry"):
        module, was_on_disk = cache.load_module(make_source(5))
    forget(module)
    assert was_on_disk is False
    assert entry_files(tmp_path) == []
    assert pathlib.Path(module.__file__).parent != tmp_path


def _assert_private_fallback(module, cache_dir: pathlib.Path) -> None:
    """The module must come from a fresh 0700 temporary directory, not the cache dir."""
    loaded = pathlib.Path(module.LOADED_FROM)
    assert loaded.parent != cache_dir
    assert loaded.parent.name.startswith("jitgraph-private-")
    assert stat.S_IMODE(loaded.parent.stat().st_mode) == 0o700


def test_world_writable_cache_directory_is_refused(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    cache_dir.chmod(0o777)
    cache = dc.DiskCache(cache_dir)
    with pytest.warns(dc.CacheWarning, match="writable by group or others"):
        module, was_on_disk = cache.load_module(make_source(6))
    forget(module)
    assert was_on_disk is False
    _assert_private_fallback(module, cache_dir)
    assert list(cache_dir.iterdir()) == []  # nothing written into the unsafe directory
    assert cache.stats["rejected"] == 1 and cache.stats["writes"] == 0


def test_directory_not_owned_by_user_is_refused(tmp_path, monkeypatch):
    cache = dc.DiskCache(tmp_path / "cache")
    cache.load_module(make_source(7, token="x"))  # creates the directory normally
    forget(sys.modules[dc.MODULE_PREFIX + cache.entry_name(make_source(7, token="x"))])
    monkeypatch.setattr(dc, "_current_uid", lambda: os.getuid() + 12345)
    with pytest.warns(dc.CacheWarning, match="owned by uid"):
        module, was_on_disk = cache.load_module(make_source(7, token="x"))
    forget(module)
    assert was_on_disk is False
    _assert_private_fallback(module, tmp_path / "cache")


@pytest.mark.parametrize("problem", ["world_writable", "other_owner", "symlink"])
def test_unsafe_entry_file_is_never_imported(tmp_path, problem):
    cache = dc.DiskCache(tmp_path)
    source = make_source(8)
    module, _ = cache.load_module(source)
    forget(module)
    entry = tmp_path / f"{cache.entry_name(source)}.py"
    if problem == "world_writable":
        entry.chmod(0o777)
        match = "writable by group or others"
    elif problem == "other_owner":
        if os.getuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(entry, 12345, -1)
        match = "owned by uid 12345"
    else:
        elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere.py"
        entry.rename(elsewhere)
        entry.symlink_to(elsewhere)
        match = "symbolic link"
    with pytest.warns(dc.CacheWarning, match=match):
        module, was_on_disk = cache.load_module(source)
    forget(module)
    assert was_on_disk is False
    _assert_private_fallback(module, tmp_path)
    assert cache.stats["rejected"] == 1


def test_unsafe_numba_cache_file_is_refused(tmp_path):
    """Numba unpickles its index/data files, so they get the same checks as the .py."""
    cache = dc.DiskCache(tmp_path)
    source = make_source(9)
    digest = cache.entry_name(source)
    module, _ = cache.load_module(source)
    forget(module)
    fake = tmp_path / "__pycache__" / f"{digest}.kern-10.py311.nbi"
    fake.write_bytes(b"not a pickle")
    fake.chmod(0o666)
    with pytest.warns(dc.CacheWarning, match="Numba cache file"):
        module, was_on_disk = cache.load_module(source)
    forget(module)
    assert was_on_disk is False
    _assert_private_fallback(module, tmp_path)


def test_unsafe_numba_cache_file_is_refused_after_numba_cache_dir_was_unset(tmp_path,
                                                                           monkeypatch):
    """Numba rereads NUMBA_CACHE_DIR at each compile, so the files checked are where it looks
    now, not where a variable since removed pointed at its last compile."""
    from numba.core import config
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))
    config.reload_config()                          # (as a compile would)
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    test_unsafe_numba_cache_file_is_refused(tmp_path / "cache")
    config.reload_config()


# --------------------------------------------------------------------------
# In-process behaviour with Numba compilation (one small compile per module)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "modify"])
def test_corrupted_entry_is_discarded_and_rewritten(tmp_path, damage):
    cache = dc.DiskCache(tmp_path)
    source = make_source(10)
    module, _ = cache.load_module(source)
    forget(module)
    entry = tmp_path / f"{cache.entry_name(source)}.py"
    good = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(good[: len(good) // 2])
    else:
        entry.write_bytes(good.replace(b"* 10 + 1", b"* 99 + 1"))
    with pytest.warns(dc.CacheWarning, match="does not match its hash"):
        module, was_on_disk = cache.load_module(source)
    try:
        assert was_on_disk is False
        assert entry.read_bytes() == good  # rewritten
        assert pathlib.Path(module.LOADED_FROM) == entry
        assert module.kern(3) == 31  # the original code, not the modified one
        assert cache.stats["rejected"] == 1 and cache.stats["writes"] == 2
    finally:
        forget(module)


def test_same_function_name_in_different_modules_gets_unique_symbols(tmp_path):
    """Different sources give different module names, hence distinct LLVM symbols (numba#10486)."""
    cache = dc.DiskCache(tmp_path)
    mod_a, _ = cache.load_module(make_source(11, name="kernel"))
    mod_b, _ = cache.load_module(make_source(12, name="kernel"))
    try:
        assert mod_a.__name__ != mod_b.__name__
        assert (mod_a.kernel(2), mod_b.kernel(2)) == (23, 25)
        [cres_a] = mod_a.kernel.overloads.values()
        [cres_b] = mod_b.kernel.overloads.values()
        assert cres_a.fndesc.mangled_name != cres_b.fndesc.mangled_name
        assert mod_a.__name__ in cres_a.fndesc.mangled_name
        assert mod_b.__name__ in cres_b.fndesc.mangled_name
        assert dc.numba_compile_count(mod_a) == dc.numba_compile_count(mod_b) == 1
    finally:
        forget(mod_a)
        forget(mod_b)


# --------------------------------------------------------------------------
# Across processes
# --------------------------------------------------------------------------

CHILD = r'''
import importlib, importlib.util, json, pathlib, sys, time, warnings
t0 = time.perf_counter()
REPO = pathlib.Path(sys.argv[1])
sys.path.insert(0, str(REPO))
try:
    dc = importlib.import_module("jitgraph.compiler.disk_cache")
except ImportError:
    spec = importlib.util.spec_from_file_location(
        "_dc", REPO / "jitgraph" / "compiler" / "disk_cache.py")
    dc = importlib.util.module_from_spec(spec)
    sys.modules["_dc"] = dc
    spec.loader.exec_module(dc)
job = json.loads(pathlib.Path(sys.argv[2]).read_text())
cache = dc.DiskCache(job["dir"])
out = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for source in job["sources"]:
        t1 = time.perf_counter()
        module, was_on_disk = cache.load_module(source)
        result = module.kern(job["arg"])
        t2 = time.perf_counter()
        out.append({
            "result": result,
            "was_on_disk": was_on_disk,
            "compiles": dc.numba_compile_count(module),
            "cache_loads": sum(module.kern.stats.cache_hits.values()),
            "digest": module.__name__[len(dc.MODULE_PREFIX):],
            "numba_cache_path": module.kern.stats.cache_path,
            "seconds": t2 - t1,
        })
print(json.dumps({
    "modules": out,
    "stats": cache.stats,
    "warnings": [(w.category.__name__, str(w.message)) for w in caught],
    "total_seconds": time.perf_counter() - t0,
}))
'''


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)  # keep Numba's files in <dir>/__pycache__
    env.pop("NUMBA_DISABLE_JIT", None)
    return env


def _start_child(tmp_path: pathlib.Path, cache_dir: pathlib.Path, sources: list[str], arg: int):
    script = tmp_path / "child.py"
    if not script.exists():
        script.write_text(CHILD)
    job = tmp_path / f"job-{uuid.uuid4().hex}.json"
    job.write_text(json.dumps({"dir": str(cache_dir), "sources": sources, "arg": arg}))
    return subprocess.Popen(
        [sys.executable, str(script), str(REPO), str(job)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(),
    )


def _finish(proc) -> dict:
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def _run_child(tmp_path, cache_dir, sources, arg) -> dict:
    return _finish(_start_child(tmp_path, cache_dir, sources, arg))


def test_second_process_loads_machine_code_without_compiling(tmp_path):
    cache_dir = tmp_path / "cache"
    sources = [make_source(13)]
    cold = _run_child(tmp_path, cache_dir, sources, 3)
    warm = _run_child(tmp_path, cache_dir, sources, 3)
    [c], [w] = cold["modules"], warm["modules"]
    assert c["result"] == w["result"] == 40
    assert (c["was_on_disk"], c["compiles"], c["cache_loads"]) == (False, 1, 0)
    assert (w["was_on_disk"], w["compiles"], w["cache_loads"]) == (True, 0, 1)
    assert pathlib.Path(w["numba_cache_path"]) == cache_dir / "__pycache__"
    assert warm["warnings"] == [] and cold["warnings"] == []
    # Timings are reported, not asserted (run pytest -s to see them).
    print(f"\ncold: load+first call {c['seconds'] * 1e3:.0f} ms, process {cold['total_seconds']:.2f} s;"
          f" warm: load+first call {w['seconds'] * 1e3:.0f} ms, process {warm['total_seconds']:.2f} s")


def test_concurrent_processes_compiling_the_same_entry(tmp_path):
    cache_dir = tmp_path / "cache"
    sources = [make_source(14)]
    procs = [_start_child(tmp_path, cache_dir, sources, 2) for _ in range(2)]
    results = [_finish(p) for p in procs]
    for res in results:
        [m] = res["modules"]
        assert m["result"] == 29
        assert not [w for w in res["warnings"] if w[0] == "CacheWarning"], res["warnings"]
    [entry] = entry_files(cache_dir)  # one entry, no temp files
    assert hashlib.sha256(entry.read_bytes()).hexdigest() == entry.stem
    leftovers = [p for p in (cache_dir / "__pycache__").iterdir()
                 if ".tmp." in p.name or p.name.endswith(".tmp")]
    assert not leftovers
    # Numba data files come with a checksum sidecar.
    names = {p.name for p in (cache_dir / "__pycache__").iterdir()}
    assert all(n + ".sha256" in names for n in names if n.endswith(".nbc"))


def _damage(path: pathlib.Path, how: str) -> None:
    data = path.read_bytes()
    if how in ("empty", "delete"):
        path.write_bytes(b"") if how == "empty" else path.unlink()
    elif how == "half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "objcode":  # int3 opcodes inside the cached ELF object: Numba alone would run them
        start = data.index(b"\x7fELF") + 0x40
        path.write_bytes(data[:start] + b"\xcc" * 64 + data[start + 64:])
    else:  # overwrite 64 bytes in the middle with garbage
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes(range(7, 71)) + data[mid + 64:])


def test_corrupted_numba_cache_files_lead_to_a_correct_recompile(tmp_path):
    """Damaged Numba files: Numba alone raises on the first call or runs broken code; we recompile."""
    cache_dir = tmp_path / "cache"
    cases = [
        ("nbi", "empty"),        # Numba: EOFError
        ("nbi", "garbage"),      # Numba: pickle/unicode error, or a silently stale index
        ("nbc", "half"),         # checksum mismatch (Numba: UnpicklingError)
        ("nbc", "garbage"),      # checksum mismatch (Numba: LLVM bitcode parsing error)
        ("nbc", "objcode"),      # checksum mismatch (Numba: executes the bytes, SIGTRAP)
        ("nbc.sha256", "delete"),  # unverifiable: silently treated as not cached
        ("nbc", "objcode", "eager"),  # same, compiled while the module is imported
    ]
    sources = [make_source(20 + i, signature="int64(int64)" if len(case) > 2 else "")
               for i, case in enumerate(cases)]
    first = _run_child(tmp_path, cache_dir, sources, 2)
    assert [m["compiles"] for m in first["modules"]] == [1] * len(cases)
    for (kind, how, *_), m in zip(cases, first["modules"]):
        pycache = pathlib.Path(m["numba_cache_path"])
        [target] = pycache.glob(f"{m['digest']}.*.{kind}")
        _damage(target, how)

    second = _run_child(tmp_path, cache_dir, sources, 2)
    expected = [2 * (20 + i) + 1 for i in range(len(cases))]
    assert [m["result"] for m in second["modules"]] == expected
    assert [m["was_on_disk"] for m in second["modules"]] == [True] * len(cases)
    assert [m["compiles"] for m in second["modules"]] == [1] * len(cases)
    numba_warnings = [w[1] for w in second["warnings"]
                      if w[0] == "CacheWarning" and "unreadable Numba cache entry" in w[1]]
    assert sum("EOFError" in w for w in numba_warnings) == 1, numba_warnings
    assert sum("checksum" in w for w in numba_warnings) == 4, numba_warnings
    # Garbage in the index may raise or leave a valid but non-matching pickle,
    # which Numba treats as stale; both end in a recompile.
    assert len(numba_warnings) in (5, 6), second["warnings"]
    assert second["stats"]["rejected"] == len(numba_warnings)

    # The recompiled code was saved over the damaged files: the next process loads it.
    third = _run_child(tmp_path, cache_dir, sources, 2)
    assert [m["result"] for m in third["modules"]] == expected
    assert [m["compiles"] for m in third["modules"]] == [0] * len(cases)
    assert third["warnings"] == []
