"""The kernels' helpers cache under ``JITGRAPH_CACHE_DIR``, locked and bound to their keys.

Named regressions of the reliability issue: the helpers' machine code used to live in the
installed package's ``kernels/__pycache__``, updated without a lock; two overloads of one
helper could cross (an int64 ``a.T @ b`` then ran float64 machine code and returned wrong
integers), and a data file copied with its sidecar from another entry ran the other program.
Each test runs fresh processes (Numba's cache is only observable across processes).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# Two overloads of the loop product (int64 and int32) and a float64 BLAS product, checked
# against NumPy.
CHILD = textwrap.dedent("""\
    import json, sys, warnings
    import numpy as np
    import jitgraph, jitgraph.numpy as jnp
    warnings.simplefilter("always")
    rng = np.random.default_rng(0)
    a = rng.integers(-9, 9, (4, 3)); b = rng.integers(-9, 9, (4, 5))
    af, bf = a.astype(np.float64), b.astype(np.float64)
    order = sys.argv[1:] or ["int", "int32", "float"]
    args = {"int": (a, b), "int32": (a.astype(np.int32), b.astype(np.int32)), "float": (af, bf)}
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        for kind in order:
            x, y = args[kind]
            f = jitgraph.jit(lambda x, y: x.T @ y)
            out[kind] = bool(np.array_equal(f(x, y), x.T @ y))
    import jitgraph.kernels as k
    out["warnings"] = [str(w.message) for w in caught]
    out["package"] = k.__path__[0]
    print(json.dumps(out))
    """)


# the session's shared helpers cache is left out: these tests look at a cache's own helpers
_ENV = {k: v for k, v in os.environ.items() if k != "JITGRAPH_HELPER_CACHE_DIR"}


def _run(cache: pathlib.Path, *args: str) -> dict:
    env = {**_ENV, "JITGRAPH_CACHE_DIR": str(cache), "JITGRAPH_NATIVE": "0",
           "JITGRAPH_COMPILE_WORKERS": "0", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True,
                          text=True, timeout=300, cwd=str(cache.parent))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _helper_files(cache: pathlib.Path, pattern: str) -> list[pathlib.Path]:
    return sorted((cache / "helpers").rglob(pattern))


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> pathlib.Path:
    """A cache where one process compiled both overloads of the loop product."""
    cache = tmp_path_factory.mktemp("helpers") / "cache"
    first = _run(cache)
    assert first["int"] and first["int32"] and first["float"], first
    return cache


def test_helpers_live_under_the_cache_directory_not_the_package(filled):
    loops = _helper_files(filled, "matmul.matmul_loop-*.nbi")
    assert len(loops) == 1 and loops[0].parent.name == "kernels", loops
    fingerprint = loops[0].parent.parent.name
    assert len(fingerprint) == 16 and loops[0].parent.parent.parent == filled / "helpers"
    assert len(_helper_files(filled, "matmul.matmul_loop-*.nbc")) == 2     # two overloads
    for data in _helper_files(filled, "*.nbc"):
        assert (data.parent / (data.name + ".sha256")).is_file(), data
    package = pathlib.Path(_run(filled)["package"]) / "__pycache__"
    assert not list(package.glob("*.nbi")) and not list(package.glob("*.nbc"))


def test_a_crossed_index_is_refused_not_run(filled, tmp_path):
    """Swap the two overloads' data files (with their sidecars), as an unlocked index update
    left them: the fresh process refuses both and recompiles; both answers stay right."""
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    one, two = _helper_files(cache, "matmul.matmul_loop-*.nbc")
    for suffix in ("", ".sha256"):
        a, b = pathlib.Path(str(one) + suffix), pathlib.Path(str(two) + suffix)
        tmp = a.with_name("swap")
        a.rename(tmp), b.rename(a), tmp.rename(b)
    run = _run(cache)
    assert run["int"] and run["int32"] and run["float"], run
    refused = [w for w in run["warnings"] if "matmul_loop" in w and "checksum" in w]
    assert len(refused) == 2, run["warnings"]
    again = _run(cache)                   # rebuilt: loads silently now
    assert again["int"] and again["int32"] and not again["warnings"], again


def test_a_data_file_copied_with_its_sidecar_from_another_entry_is_refused(filled, tmp_path):
    """The sidecar binds a data file to its own name and key: the int32 overload copied
    over the int64 one, sidecar included, is not run for int64 arguments."""
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    index = _helper_files(cache, "matmul.matmul_loop-*.nbi")[0]
    one, two = _helper_files(cache, "matmul.matmul_loop-*.nbc")
    for suffix in ("", ".sha256"):
        shutil.copy(str(two) + suffix, str(one) + suffix)
    assert index.exists()
    run = _run(cache, "int", "int32")
    assert run["int"] and run["int32"], run
    assert any("matmul_loop" in w and "checksum" in w for w in run["warnings"]), run


def test_damaged_helper_files_are_rebuilt_with_one_warning(filled, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    for data in _helper_files(cache, "matmul.matmul_loop-*.nbc"):
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    run = _run(cache)
    assert run["int"] and run["int32"], run
    assert 1 <= len([w for w in run["warnings"] if "matmul_loop" in w]) <= 2, run["warnings"]
    assert not _run(cache)["warnings"]


def test_the_fingerprint_covers_every_source_file_of_the_package(tmp_path):
    """A change in the native loader alone (no version constant bumped) changes the key."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "jitgraph", tree / "jitgraph",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "kernels", tree / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import time; t = time.perf_counter();"
            "from jitgraph.compiler.settings import codegen_fingerprint as f;"
            "t = time.perf_counter(); v = f(); print(v, time.perf_counter() - t)")

    def fingerprint() -> tuple[str, float]:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**_ENV, "PYTHONPATH": str(tree)}, timeout=120,
                             cwd=str(tmp_path), check=True).stdout.split()
        return out[0], float(out[1])

    before, seconds = fingerprint()
    assert seconds < 0.5
    for rel in ("jitgraph/compiler/native.py", "kernels/matmul.py",
                "jitgraph/compiler/backends/cpu_program.py"):
        path = tree / rel
        text = path.read_text()
        path.write_text(text + "\n# a change\n")
        assert fingerprint()[0] != before, rel
        path.write_text(text)
    assert fingerprint()[0] == before


def test_a_read_only_package_is_never_written(tmp_path):
    """The package copied and made read-only (as a system site-packages is): programs
    compile and load, and nothing appears inside it."""
    tree = tmp_path / "site"
    shutil.copytree(REPO / "jitgraph", tree / "jitgraph",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "kernels", tree / "jitgraph" / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    for p in [tree, *tree.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        env = {**_ENV, "JITGRAPH_CACHE_DIR": str(tmp_path / "cache"),
               "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                                  text=True, timeout=300, cwd=str(tmp_path))
            assert proc.returncode == 0, proc.stderr[-3000:]
            run = json.loads(proc.stdout.strip().splitlines()[-1])
            assert run["int"] and run["int32"] and run["float"] and not run["warnings"], run
            assert run["package"] == str(tree / "jitgraph" / "kernels")
    finally:
        for p in [tree, *tree.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before
    assert np.all([p.is_file() for p in (tmp_path / "cache" / "helpers").rglob("*.nbi")])


def test_the_locator_names_the_source_file_numba_warns_about():
    """Numba points its warning about code it cannot cache (``NUMBA_OPT=0`` keeps global arrays
    as dynamic globals) at the locator's source file: jitgraph's locator has one, so that
    warning is Numba's own, not an AttributeError reported as a failed cache save."""
    from jitgraph.compiler.state import STATE
    from jitgraph.kernels import attention
    locator_class = STATE.patches.get("locator")
    if locator_class is None:
        pytest.skip("NUMBA_CACHE_LOCATOR_CLASSES overrides jitgraph's locator")
    fn = attention.row_dots.py_func
    locator = locator_class.from_function(fn, fn.__code__.co_filename)
    assert locator is not None and locator._py_file == fn.__code__.co_filename
