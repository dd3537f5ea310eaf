"""The disk cache's size limit (``jitgraph/compiler/cache_limit.py`` and ``DiskCache.prune``):
sizes parsed, entries found and ordered by last use, least recently used entries evicted whole,
the cache kept under its limit while many programs compile, nothing this process loaded
evicted, and two ``python -m jitgraph cache prune`` processes at once leaving a consistent
cache while a program that loaded an evicted entry keeps running."""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from jitgraph.compiler import cache_limit
from jitgraph.compiler import disk_cache as dc

REPO = pathlib.Path(__file__).resolve().parents[1]
GiB = 1 << 30


def small_module(mult: int) -> str:
    """A generated module with one lazily compiled function (unique per call)."""
    return textwrap.dedent(f"""\
        # token {uuid.uuid4().hex}
        import numba


        @numba.njit(cache=True)
        def kern(x):
            return x * {mult} + 1
        """)


def fake_entry(directory: pathlib.Path, payload: int, when: float) -> str:
    """An entry's files as the cache holds them (module, bundle, Numba's index, data and
    sidecar), *payload* bytes of data, last used at *when*; returns its digest."""
    source = f"# fake entry {uuid.uuid4().hex}\n".encode()
    digest = hashlib.sha256(source).hexdigest()
    pycache = directory / "__pycache__"
    pycache.mkdir(parents=True, exist_ok=True)
    files = {directory / f"{digest}.py": source,
             directory / f"{digest}.native": b"n" * 100,
             pycache / f"{digest}.kern-3.py311.nbi": b"i" * 50,
             pycache / f"{digest}.kern-3.py311.1.nbc": b"d" * payload,
             pycache / f"{digest}.kern-3.py311.1.nbc.sha256": b"s" * 65}
    for path, data in files.items():
        path.write_bytes(data)
        os.utime(path, (when, when))
    return digest


def fake_size(payload: int) -> int:
    return len("# fake entry \n") + 32 + 100 + 50 + payload + 65


def entry_digests(directory: pathlib.Path) -> set[str]:
    return {e.digest for e in cache_limit.scan(directory)}


def assert_consistent(directory: pathlib.Path) -> None:
    """Every entry left is whole: a module whose bytes hash to its name, with its files."""
    for e in cache_limit.scan(directory):
        names = {os.path.basename(f) for f in e.files}
        assert f"{e.digest}.py" in names, names
        data = (directory / f"{e.digest}.py").read_bytes()
        assert hashlib.sha256(data).hexdigest() == e.digest
    leftovers = [p for p in directory.rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, leftovers


def test_sizes_and_the_limit_in_force(monkeypatch):
    assert cache_limit.parse_size("1024") == 1024
    assert cache_limit.parse_size("4G") == 4 * GiB
    assert cache_limit.parse_size("4GiB") == 4 * GiB
    assert cache_limit.parse_size("512m") == 512 << 20
    assert cache_limit.parse_size("1.5K") == 1536
    with pytest.raises(ValueError, match="JITGRAPH_CACHE_MAX_BYTES='3x' is not a size"):
        cache_limit.parse_size("3x")
    monkeypatch.delenv("JITGRAPH_CACHE_MAX_BYTES", raising=False)
    assert cache_limit.max_bytes_from_env() == cache_limit.DEFAULT_MAX_BYTES == 4 * GiB
    monkeypatch.setenv("JITGRAPH_CACHE_MAX_BYTES", "0")
    assert cache_limit.max_bytes_from_env() is None
    monkeypatch.setenv("JITGRAPH_CACHE_MAX_BYTES", "2M")
    assert dc.DiskCache("/nonexistent").limit() == 2 << 20
    assert dc.DiskCache("/nonexistent", max_bytes=5000).limit() == 5000


def test_scan_groups_whole_entries_and_orders_them_by_last_use(tmp_path):
    now = time.time()
    old = fake_entry(tmp_path, 1000, now - 300)
    new = fake_entry(tmp_path, 2000, now - 100)
    (tmp_path / "peaks").mkdir()                       # the profiler's measurements
    (tmp_path / "peaks" / "cpu-x.json").write_text("{}")
    (tmp_path / ".lock").write_text("")
    stale = tmp_path / ".abc.py.q1w2.tmp"              # left by a killed writer
    stale.write_text("x")
    os.utime(stale, (now - 7200, now - 7200))
    fresh = tmp_path / ".def.py.e3r4.tmp"              # being written now
    fresh.write_text("x")
    entries = cache_limit.scan(tmp_path, remove_stale_temps=True)
    assert [e.digest for e in entries] == [old, new]
    assert [e.size for e in entries] == [fake_size(1000), fake_size(2000)]
    assert [len(e.files) for e in entries] == [5, 5]
    assert entries[0].last_used == pytest.approx(now - 300)
    assert not stale.exists() and fresh.exists()
    # an access (atime) counts as a use
    os.utime(tmp_path / f"{old}.py", (now, now - 300))
    assert [e.digest for e in cache_limit.scan(tmp_path)] == [new, old]


def test_select_victims_least_recently_used_first_down_to_low_water():
    es = [cache_limit.CacheEntry(f"{i:064x}", [], 100, float(i)) for i in range(10)]
    assert cache_limit.select_victims(es, 1000) == []                   # fits: nothing
    # over 900: evict down to 0.9 * 900 = 810 -> the two oldest go (1000 -> 800)
    assert [e.digest for e in cache_limit.select_victims(es, 900)] == [es[0].digest, es[1].digest]
    kept = {es[0].digest}
    assert [e.digest for e in cache_limit.select_victims(es, 900, keep=kept)] == \
        [es[1].digest, es[2].digest]


def test_evicting_removes_the_whole_entry_index_first(tmp_path, monkeypatch):
    digest = fake_entry(tmp_path, 10, time.time())
    [entry] = cache_limit.scan(tmp_path)
    order = []
    real_unlink = os.unlink
    monkeypatch.setattr(cache_limit.os, "unlink", lambda p: (order.append(p), real_unlink(p)))
    assert cache_limit.evict(entry) == fake_size(10)
    assert os.path.splitext(order[0])[1] == ".nbi" and order[-1].endswith(f"{digest}.py")
    assert cache_limit.scan(tmp_path) == []
    assert cache_limit.evict(entry) == 0                                # gone already: no error


def test_prune_waits_for_loaders_and_other_pruners(tmp_path):
    now = time.time()
    for i in range(4):
        fake_entry(tmp_path, 1000, now - 100 + i)
    cache = dc.DiskCache(tmp_path)
    with cache_limit.DirectoryLock(tmp_path, exclusive=False) as loader:
        assert loader.acquire()
        busy = cache.prune(max_bytes=0, timeout=0.1)
        assert busy["busy"] and busy["evicted"] == 0 and len(entry_digests(tmp_path)) == 4
    done = cache.prune(max_bytes=2 * fake_size(1000), timeout=0.1)
    # 4 entries over a limit of 2: down to 0.9 * 2 entries, i.e. one left
    assert (done["busy"], done["evicted"], done["entries"]) == (False, 3, 1)
    assert done["freed"] == 3 * fake_size(1000) and done["bytes"] == fake_size(1000)
    assert cache_limit.recorded_usage(tmp_path) == fake_size(1000)
    assert cache.clear()["entries"] == 0 and cache_limit.recorded_usage(tmp_path) == 0


def test_many_programs_stay_under_the_limit_and_loaded_ones_stay(tmp_path):
    """24 generated modules compiled under a limit that holds about 4: after every compile
    the cache is under its limit, and the module this process keeps loaded (the least
    recently used of all) is never evicted."""
    cache = dc.DiskCache(tmp_path, max_bytes=10 ** 9)
    kept, _ = cache.load_module(small_module(100))
    assert kept.kern(1) == 101
    one = sum(e.size for e in cache.entries())            # one compiled entry's bytes
    limit = 4 * one
    cache.max_bytes = limit
    kept_digest = kept.__name__[len(dc.MODULE_PREFIX):]
    old = time.time() - 3600
    for f in cache_limit.scan(tmp_path)[0].files:          # make it the oldest entry
        os.utime(f, (old, old))
    sizes = []
    try:
        for i in range(24):
            module, was_on_disk = cache.load_module(small_module(i))
            assert not was_on_disk and module.kern(3) == 3 * i + 1
            sys.modules.pop(module.__name__)               # done with it: evictable
            usage = cache.usage()
            sizes.append(usage["bytes"])
            assert usage["bytes"] <= limit, (i, usage, one)
        assert kept_digest in entry_digests(tmp_path)
        assert kept.kern(2) == 201 and kept.kern(2.5) == 251.0  # and compiles a new overload
        assert max(sizes) > 0.8 * limit                   # it did fill up to the limit
        assert cache_limit.recorded_usage(tmp_path) == pytest.approx(cache.usage()["bytes"], rel=0.3)
        assert_consistent(tmp_path)
    finally:
        sys.modules.pop(kept.__name__, None)


# A program that loads an entry, waits while other processes prune everything, then runs
# again (compiled code in memory) and compiles a new overload (its files were evicted).
HOLDER = r'''
import json, os, sys, time
from jitgraph.compiler import disk_cache as dc
cache = dc.DiskCache(sys.argv[1], max_bytes=0)
module, _ = cache.load_module(open(sys.argv[2]).read())
first = module.kern(3)
old = time.time() - 7200                        # the oldest entry: the first to go
for name in os.listdir(sys.argv[1]) + ["__pycache__/" + n for n in os.listdir(sys.argv[1] + "/__pycache__")]:
    if name.split("/")[-1].startswith(module.__name__[len(dc.MODULE_PREFIX):]):
        os.utime(os.path.join(sys.argv[1], name), (old, old))
print("ready", flush=True)
sys.stdin.readline()                            # the pruners ran
gone = not os.path.exists(module.__file__)
print(json.dumps({"first": first, "again": module.kern(3), "new_overload": module.kern(0.5),
                  "evicted": gone, "digest": module.__name__[len(dc.MODULE_PREFIX):]}))
'''


def test_two_concurrent_prune_processes_and_a_running_program(tmp_path, capsys):
    cache_dir = tmp_path / "cache"
    now = time.time()
    fakes = [fake_entry(cache_dir, 4000, now - 1000 + 10 * i) for i in range(30)]
    (tmp_path / "holder.py").write_text(HOLDER)
    (tmp_path / "src.py").write_text(small_module(7))
    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)
    holder = subprocess.Popen([sys.executable, str(tmp_path / "holder.py"), str(cache_dir),
                               str(tmp_path / "src.py")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "ready", holder.stderr.read()
        # room for 0.9 * limit = 10.5 fake entries: the holder's entry and the 20 oldest go
        limit = int(10.5 * fake_size(4000) / cache_limit.LOW_WATER) + 1
        pruners = [subprocess.Popen([sys.executable, "-m", "jitgraph", "cache", "prune",
                                     "--dir", str(cache_dir), "--max-bytes", str(limit)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env, cwd=REPO) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in pruners]
        for p, (out, err) in zip(pruners, outs):
            assert p.returncode == 0, err
        evicted = sorted(int(out.split()[1]) for out, _ in outs)
        assert evicted == [0, 21], outs                   # one did it all, the other nothing
        out, err = holder.communicate("go\n", timeout=120)
        assert holder.returncode == 0, err
    finally:
        if holder.poll() is None:
            holder.kill()
    res = json.loads(out.strip().splitlines()[-1])
    assert res["evicted"] is True
    assert (res["first"], res["again"], res["new_overload"]) == (22, 22, 4.5)
    assert "CacheWarning" not in err
    left = entry_digests(cache_dir)
    assert set(fakes[20:]) <= left and not set(fakes[:20]) & left
    # only the holder's new overload may have come back (Numba's files, no module)
    assert left - set(fakes[20:]) <= {res["digest"]}
    for e in cache_limit.scan(cache_dir):
        if e.digest in fakes:
            assert len(e.files) == 5
    from jitgraph.__main__ import main
    capsys.readouterr()
    assert main(["cache", "info", "--dir", str(cache_dir)]) == 0
    info = capsys.readouterr().out
    assert f"directory: {cache_dir}" in info and f"in {len(left)} entries" in info
