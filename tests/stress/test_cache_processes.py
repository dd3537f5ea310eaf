"""One disk cache used by many processes: concurrent writers, writers killed mid-write,
damaged files of every kind, entries swapped between programs of the same argument types.

Each test has its own ``JITGRAPH_CACHE_DIR`` (under ``tmp_path``) and a private copy of the
package (``harness.package_copy``), so the ``kernels/`` helpers' Numba files start cold and are
found by ``harness.cache_files`` wherever they live (the copy's ``kernels/__pycache__`` before
the fix, somewhere under the cache directory after it). A fresh process afterwards must give
NumPy's answers: a clear jitgraph warning (or, for damaged files, a jitgraph error followed by
a clean run) is allowed; a raw exception, a crash (negative exit status), a hang or a wrong
value is not.
"""
from __future__ import annotations

import concurrent.futures
import pathlib
import random
import shutil
import time

import pytest

from . import harness

# what a populated cache holds: loop and BLAS products, a compiled driver, and two programs
# of the same argument types (x * 2 and x + 1 on one float64 vector: the swapped entries)
POPULATE = ["i64_aT_b", "f32_aT_b", "tanh_sum", "mul2", "add1"]
# new programs (variant b) calling the helper overloads POPULATE compiled: their compile loads
# matmul_loop (int64), blas_gemm (float32) and the fast tanh from the helpers' cache
HELPER_USERS = ["i64_aT_b", "f32_aT_b", "tanh_sum"]
DAMAGED_PER_KIND = 4        # files damaged per kind and round (seeded choice)
KINDS = ["py", "native", "nbi", "nbc", "sha256", "helper_nbi", "helper_nbc", "helper_sha256"]
NUMBA_KINDS = {"nbi", "nbc", "sha256", "helper_nbi", "helper_nbc", "helper_sha256"}
PARALLEL = 2                # fresh processes at once where they share nothing (2 cores)


def _start_together(tmp_path, r, jobs, *, cache, root):
    """Start one ``programs`` child per job, all released at once by a start file."""
    go = tmp_path / f"go{r}"
    children = []
    for w, args in enumerate(jobs):
        ready = tmp_path / f"ready{r}-{w}"
        children.append((ready, harness.Child(
            "programs", dict(args, ready_file=str(ready), go_file=str(go)), cache_dir=cache,
            root=root, logs=tmp_path / "logs", name=f"round{r}-writer{w}", timeout_s=90)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
            ready.exists() or c.proc.poll() is not None for ready, c in children):
        time.sleep(0.01)
    go.touch()
    return [c.finish() for _, c in children]


# ----------------------------------------------------------------------------- concurrent writers

def test_concurrent_processes_compiling_into_one_cache(tmp_path):
    """Four processes started together, each compiling the same two programs and one of its
    own, in its own order; then a fresh process runs all of them from the cache."""
    common = ["mul2", "i64_aT_b"]
    own = ["add1", "i32_a_bT", "f32_a_b", "tanh_sum"]
    n = harness.rounds(1)
    problems = []
    for r in range(n):
        root, cache = harness.package_copy(tmp_path / f"pkg{r}"), tmp_path / f"cache{r}"
        jobs = [{"programs": common + [mine], "seed": harness.SEED + r,
                 "order_seed": harness.SEED * 31 + 4 * r + w} for w, mine in enumerate(own)]
        for res in _start_together(tmp_path, r, jobs, cache=cache, root=root):
            problems += harness.check(res)
        fresh = harness.run("programs", {"programs": common + own, "seed": harness.SEED + r},
                            cache_dir=cache, root=root, logs=tmp_path / "logs",
                            name=f"round{r}-fresh", timeout_s=90)
        problems += harness.check(fresh)
    harness.fail_if(problems, f"concurrent writers: {len(problems)} problems in {n} rounds")


# ----------------------------------------------------------------------------- killed writers

def test_writers_killed_mid_write(tmp_path):
    """Four writers started together and killed with SIGKILL (their whole process group) at
    seeded random moments (importing, compiling, saving Numba's files, writing bundles); then a
    fresh process runs every program, and a second one after it: NumPy's answers (warnings
    allowed), no crash."""
    rng = random.Random(harness.SEED * 101 + 7)
    root, cache = harness.package_copy(tmp_path / "pkg"), tmp_path / "cache"
    programs = ["mul2", "tanh_sum", "i64_aT_b", "f32_aT_b", "mixed_f32_f64"]
    kills = []
    for r in range(harness.rounds(1)):
        writers = [(rng.uniform(0.3, 3.5), harness.Child(
            "programs", {"programs": programs, "seed": harness.SEED,
                         "order_seed": rng.randrange(1 << 30)},
            cache_dir=cache, root=root, logs=tmp_path / "logs", name=f"round{r}-writer{w}",
            timeout_s=90)) for w in range(4)]
        t0 = time.monotonic()
        for delay, child in sorted(writers, key=lambda x: x[0]):
            time.sleep(max(0.0, delay - (time.monotonic() - t0)))
            alive = child.proc.poll() is None
            child.kill()
            child.finish()
            kills.append(f"{delay:.2f}s{'' if alive else ' (had exited)'}")
    leftovers = sorted(p.name for p in cache.rglob("*.tmp*"))
    problems = []
    for name in ("fresh", "fresh-again"):
        res = harness.run("programs", {"programs": programs, "seed": harness.SEED,
                                       "pairs": [["i64_aT_b", "b"], ["f32_aT_b", "b"]]},
                          cache_dir=cache, root=root, logs=tmp_path / "logs", name=name,
                          timeout_s=120)
        problems += harness.check(res)
    harness.fail_if(problems, f"killed writers (SIGKILL at {', '.join(kills)}; temporary files "
                              f"left: {len(leftovers)}): the fresh processes afterwards")


# ----------------------------------------------------------------------------- a populated cache

@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A package copy and a cache holding everything POPULATE compiles (native bundles too),
    and each program's module digests (driver first)."""
    tmp = tmp_path_factory.mktemp("populated")
    root, cache = harness.package_copy(tmp / "pkg"), tmp / "cache"
    res = harness.run("programs", {"programs": POPULATE, "seed": harness.SEED, "describe": True},
                      cache_dir=cache, root=root, logs=tmp / "logs", name="populate", timeout_s=120)
    problems = harness.check(res)
    if problems:
        pytest.fail("populating the cache failed:\n" + "\n".join(problems), pytrace=False)
    digests = {rec["name"]: [m[len("jitgraph_gen_"):] for m in rec["modules"]]
               for rec in res.data["programs"]}
    return root, cache, digests


def _copy_populated(populated, dest: pathlib.Path):
    src_root, src_cache, _ = populated
    root = harness.copy_root(src_root, dest / "pkg")
    cache = dest / "cache"
    shutil.copytree(src_cache, cache, symlinks=True)
    return root, cache


# ----------------------------------------------------------------------------- damaged files

def _damaged_case(populated, tmp: pathlib.Path, kind: str, r: int) -> dict:
    """Damage files of *kind* in a copy of the populated cache, run a fresh process (and a
    second one after a jitgraph error); the problems found."""
    root, cache = _copy_populated(populated, tmp)
    files = harness.cache_files(cache, harness.kernels_dir_of(root))[kind]
    if not files:
        return {"files": 0, "damaged": [], "problems": []}
    rng = random.Random(f"{harness.SEED}-{kind}-{r}")
    files = rng.sample(files, min(DAMAGED_PER_KIND, len(files)))
    damaged = [harness.damage(p, "truncate" if (i + r) % 2 == 0 else "flip", rng)
               for i, p in enumerate(files)]
    env = {"JITGRAPH_NATIVE": "0"} if kind in NUMBA_KINDS else None
    if kind.startswith("helper"):   # programs on disk have the helpers linked in: new ones
        run = {"pairs": [[p, "b"] for p in HELPER_USERS], "seed": harness.SEED}
    else:
        run = {"programs": POPULATE, "seed": harness.SEED}
    first = harness.run("programs", run, cache_dir=cache, root=root, logs=tmp / "logs",
                        name=f"{kind}-fresh", env=env, timeout_s=120)
    found = harness.check(first, allow_jitgraph_errors=True)
    if not found and first.data and harness.jitgraph_errors(first.data["programs"]):
        # a clear error is fine once; the next process must not fail again
        again = harness.run("programs", run, cache_dir=cache, root=root, logs=tmp / "logs",
                            name=f"{kind}-again", env=env, timeout_s=120)
        found += [f"after jitgraph errors in the first run "
                  f"({harness.jitgraph_errors(first.data['programs'])}): {p}"
                  for p in harness.check(again)]
    return {"files": len(files), "damaged": damaged, "problems": [f"round {r}: {p}" for p in found]}


@pytest.fixture(scope="module")
def damaged_runs(populated, tmp_path_factory):
    """Every kind's cases, two fresh processes at a time (each case has its own copies)."""
    tmp = tmp_path_factory.mktemp("damaged")
    cases = [(kind, r) for r in range(harness.rounds(1)) for kind in KINDS]
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        futures = {case: pool.submit(_damaged_case, populated, tmp / f"{case[0]}-{case[1]}", *case)
                   for case in cases}
        out: dict = {}
        for (kind, r), fut in futures.items():
            out.setdefault(kind, []).append(fut.result())
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_cache_files(damaged_runs, kind):
    """Up to four files of one kind (seeded choice) truncated (seeded lengths, 0 included) or
    with 1-8 seeded bytes flipped, alternately; then a fresh process runs every program (with
    native bundles off for Numba's files, so that they are read), or, for the helpers' files,
    new programs whose compile loads the helpers: correct, or a jitgraph error followed by a
    correct run. (The cases of all kinds run in the module fixture, two at a time.)"""
    cases = damaged_runs[kind]
    if not any(c["files"] for c in cases):
        pytest.skip(f"no {kind} files in a populated cache" + (
            " (before the fix the helpers keep no .sha256 sidecars)" if kind == "helper_sha256" else ""))
    problems = [p for c in cases for p in c["problems"]]
    done = [d for c in cases for d in c["damaged"]]
    shown = "; ".join(done[:6]) + (f"; ... ({len(done)} files)" if len(done) > 6 else "")
    harness.fail_if(problems, f"damaged {kind} files ({shown})")


# ----------------------------------------------------------------------------- swapped entries

def _swap(a: pathlib.Path, b: pathlib.Path) -> None:
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)


def _numba_files_of(cache: pathlib.Path, digest: str) -> dict:
    """``{suffix after the function name: path}`` of Numba's data files of module *digest*
    (the ``.nbc`` and its ``.sha256``), e.g. ``py311.1.nbc``."""
    out = {}
    for p in cache.rglob(digest + ".*"):
        if p.name.endswith((".nbc", ".nbc.sha256")):
            out[p.name.split("-", 1)[1].split(".", 1)[1]] = p
    return out


def test_swapped_numba_entries_are_refused(populated, tmp_path):
    """The ``.nbc`` of each of ``x * 2``'s modules (driver and kernel) with its ``.sha256``
    swapped with ``x + 1``'s (same argument types): a fresh process (native bundles off, so
    Numba's files are read) must run the programs it was asked for, not each other."""
    root, cache = _copy_populated(populated, tmp_path)
    digests = populated[2]
    swapped = []
    for da, db in zip(digests["mul2"], digests["add1"]):
        fa, fb = _numba_files_of(cache, da), _numba_files_of(cache, db)
        for suffix in sorted(set(fa) & set(fb)):
            _swap(fa[suffix], fb[suffix])
            swapped.append(f"{fa[suffix].name} <-> {fb[suffix].name}")
    assert swapped, f"no Numba data files found for {digests}"
    res = harness.run("programs", {"programs": ["mul2", "add1"], "seed": harness.SEED},
                      cache_dir=cache, root=root, logs=tmp_path / "logs", name="fresh",
                      timeout_s=90, env={"JITGRAPH_NATIVE": "0"})
    harness.fail_if(harness.check(res), f"swapped Numba entries ({len(swapped)} files: "
                                        + "; ".join(swapped) + ")")


def test_swapped_native_bundles_are_refused(populated, tmp_path):
    """``x * 2``'s native bundle swapped with ``x + 1``'s: a fresh process must run the
    programs it was asked for."""
    root, cache = _copy_populated(populated, tmp_path)
    digests = populated[2]
    a, b = (cache / f"{digests[n][0]}.native" for n in ("mul2", "add1"))
    assert a.exists() and b.exists(), sorted(p.name for p in cache.glob("*.native"))
    _swap(a, b)
    res = harness.run("programs", {"programs": ["mul2", "add1"], "seed": harness.SEED},
                      cache_dir=cache, root=root, logs=tmp_path / "logs", name="fresh",
                      timeout_s=90)
    harness.fail_if(harness.check(res), f"swapped native bundles ({a.name} <-> {b.name})")
