"""``jitgraph/compiler/numba_patches.py``: the one module that touches Numba's internals.

Its table lists exactly the private names it touches, and they exist in the installed Numba;
``pyproject.toml`` pins the range they were checked on; no other module of ``jitgraph/`` or
``kernels/`` touches a private Numba name; and on another Numba version (simulated) the fast
paths switch off with one warning while programs still compile, compute the right numbers
and load from the disk cache in a second process through Numba's documented caching."""
from __future__ import annotations

import ast
import collections
import importlib
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import uuid
import warnings

import numpy as np
import pytest

from jitgraph.compiler import native, numba_patches
from jitgraph.compiler.disk_cache import DiskCache
from jitgraph.compiler.state import STATE

ROOT = pathlib.Path(__file__).resolve().parents[1]
PATCHES = ROOT / "jitgraph" / "compiler" / "numba_patches.py"
FAKE_VERSION = "0.99.0"

# Known private Numba uses outside numba_patches, owned elsewhere (to be moved there):
# the CUDA simulator's host array behind a simulated device buffer.
KNOWN_ELSEWHERE = {("jitgraph/device.py", "_ary"), ("jitgraph/cuda_driver.py", "_ary")}  # simulator arrays


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _numba_module(name: str | None) -> bool:
    return (name or "").split(".")[0] in ("numba", "numba_cuda", "llvmlite")


def reached_names(tree: ast.AST) -> set[str]:
    """Private names a module reaches on objects other than ``self``/``cls``: attributes,
    ``getattr``-style strings, private modules imported from Numba or llvmlite, and
    extension names given to ``numba_patches.load_extension``."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _private(n.attr) and not (
                isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")):
            names.add(n.attr)
        elif isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute)):
            func = n.func.id if isinstance(n.func, ast.Name) else n.func.attr
            args = n.args[1:2] if func in ("getattr", "hasattr", "setattr") else \
                n.args[:1] if func == "load_extension" else []
            names |= {a.value for a in args if isinstance(a, ast.Constant)
                      and isinstance(a.value, str) and _private(a.value)}
        elif isinstance(n, ast.ImportFrom) and _numba_module(n.module):
            names |= {p for p in n.module.split(".") if _private(p)}
            names |= {a.name for a in n.names if _private(a.name)}
        elif isinstance(n, ast.Import):
            for a in n.names:
                if _numba_module(a.name):
                    names |= {p for p in a.name.split(".") if _private(p)}
    return names


def defined_names(tree: ast.AST) -> set[str]:
    """Private names a module defines itself: ``self._x = ...``, functions, classes, globals."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                        and t.value.id in ("self", "cls"):
                    names.add(t.attr)
                elif isinstance(t, ast.Name):
                    names.add(t.id)
    return {x for x in names if _private(x)}


def _parse(path: pathlib.Path) -> ast.AST:
    return ast.parse(path.read_text(), str(path))


def _table_names() -> set[str]:
    return {row.name for row in numba_patches.PRIVATE if _private(row.name)}


# ----------------------------------------------------------------------------- the table

def test_table_lists_exactly_the_private_names_the_module_touches():
    touched = reached_names(_parse(PATCHES)) - defined_names(_parse(PATCHES))
    assert touched == _table_names()
    for row in numba_patches.PRIVATE:
        assert row.why and row.use in ("read", "call", "replace", "mark", "module"), row
        assert row.checked and all(numba_patches.is_supported(v) for v in row.checked), row


def test_pyproject_pins_the_checked_range():
    text = (ROOT / "pyproject.toml").read_text()
    low, high = numba_patches.SUPPORTED
    assert f'"numba>={low},<{high}"' in text
    llvmlite = re.search(r'"llvmlite>=([0-9.]+),<([0-9.]+)"', text)
    assert llvmlite, "pyproject.toml pins no llvmlite range"
    if numba_patches.fast_paths_enabled():      # the llvmlite the tested Numba runs with
        import llvmlite as installed
        release = numba_patches._release
        assert release(llvmlite[1]) <= release(installed.__version__) < release(llvmlite[2])
    assert numba_patches.is_supported("0.68.1") and numba_patches.is_supported("0.68.0rc1")
    assert not numba_patches.is_supported("0.69.0") and not numba_patches.is_supported("0.63.1")
    assert numba_patches.is_supported("0.64.0") and numba_patches.is_supported("0.67.2")


def _source(token: str) -> str:
    return textwrap.dedent(f"""\
        # token {token}
        import numba
        import numpy


        @numba.njit(cache=True)
        def kern(x):
            return numpy.tanh(x) * 2.0 + 1.0
        """)


def _forget(module) -> None:
    sys.modules.pop(module.__name__, None)


@pytest.mark.skipif(not numba_patches.fast_paths_enabled(), reason="an untested Numba")
def test_the_listed_names_exist_in_the_installed_numba(tmp_path):
    """What to re-check when the pinned range moves: every name Numba owns is still there."""
    import numba
    from numba.core.dispatcher import Dispatcher
    from numba.core.runtime import rtsys

    module, _ = DiskCache(tmp_path).load_module(_source(uuid.uuid4().hex))
    try:
        module.kern(np.ones(3))
        disp = module.kern
        cache = disp._cache
        [cres] = disp.overloads.values()
        from llvmlite.binding import ffi
        from numba.core import caching, cpu, options
        from numba.core.compiler_lock import global_compiler_lock
        owners = {"Dispatcher": disp, "Cache": cache, "IndexDataCacheFile": cache._cache_file,
                  "CodeLibrary": cres.library, "CompileResult": cres, "rtsys": rtsys,
                  "Dispatcher.enable_caching": Dispatcher.enable_caching, "numba": numba,
                  "caching": caching, "CacheImpl": caching.CacheImpl,
                  "_CompilerLock": global_compiler_lock, "llvmlite.binding.ffi.lib": ffi.lib,
                  "CPUTargetOptions": cpu.CPUTargetOptions,
                  "TargetOptions": options.TargetOptions}
        for row in numba_patches.PRIVATE:
            if row.use == "module":
                found = [importlib.util.find_spec(f"{row.owner}.{name.strip()}")
                         for name in row.name.split("/")]
                assert any(found), row
                continue
            obj = owners[row.owner]
            if row.use == "mark":
                assert row.name.startswith("_jitgraph_"), row
                continue
            for part in row.name.split("."):
                assert hasattr(obj, part), row
                obj = getattr(obj, part)
        assert numba_patches.is_guarded(cache)          # the fast path guarded it
        assert numba_patches.object_code(cres)          # compiled here: Numba's own copy
    finally:
        _forget(module)


# ----------------------------------------------------------------------------- the scan

def _numba_defined_names() -> set[str]:
    """Private names Numba, numba-cuda and llvmlite define (attributes set on ``self``,
    functions, module globals), from their sources."""
    pattern = re.compile(rb"\bself\.(_[a-z]\w*)\s*=|^\s*def (_[a-z]\w*)|^(_[a-z]\w*)\s*=",
                         re.M)
    names: set[str] = set()
    for package in ("numba", "numba_cuda", "llvmlite"):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for path in pathlib.Path(list(spec.submodule_search_locations)[0]).rglob("*.py"):
            if "tests" in path.parts:
                continue
            for m in pattern.finditer(path.read_bytes()):
                names.add((m.group(1) or m.group(2) or m.group(3)).decode())
    return names


@pytest.fixture(scope="module")
def numba_names() -> set[str]:
    """Numba's private names, less those jitgraph (or Python: namedtuple's ``_fields``,
    ``sys._getframe``...) defines alike."""
    trees = [_parse(f) for f in _project_files()]
    ours = set().union(*(defined_names(t) for t in trees))
    python = {n for obj in (collections.namedtuple("T", "a"), sys, os, threading)
              for n in dir(obj) if _private(n)}
    return _numba_defined_names() - ours - python


def _project_files() -> list[pathlib.Path]:
    files = sorted([*(ROOT / "jitgraph").rglob("*.py"), *(ROOT / "kernels").glob("*.py")])
    files.remove(PATCHES)
    return files


def suspicious(tree: ast.AST, numba_names: set[str]) -> set[str]:
    """The private Numba names a module reaches: Numba's own, or the table's unless the
    module defines that name for its own objects (``self._cache`` of a jitted function)."""
    reached = reached_names(tree)
    return (reached & numba_names) | (reached & _table_names() - defined_names(tree))


def test_the_scan_sees_private_numba_uses(numba_names):
    tree = ast.parse(textwrap.dedent("""\
        from numba import _helperlib
        import numba.core.runtime._nrt_python
        layer = numba.np.ufunc.parallel._threading_layer
        getattr(disp, "_cache").load_overload
        disp._cache._cache_file._load_data = None
        own._cache = {}      # not defined here: still suspicious
        """))
    assert suspicious(tree, numba_names) == {
        "_helperlib", "_nrt_python", "_threading_layer", "_cache", "_cache_file", "_load_data"}
    mine = ast.parse("class F:\n    def __init__(self):\n        self._cache = {}\n"
                     "def clear(f):\n    f._cache.clear()\n    return p._fields\n")
    assert suspicious(mine, numba_names) == set()


def test_no_other_module_touches_a_private_numba_name(numba_names):
    found = {(f.relative_to(ROOT).as_posix(), name) for f in _project_files()
             for name in suspicious(_parse(f), numba_names)}
    assert found - KNOWN_ELSEWHERE == set(), "private Numba names outside numba_patches.py"


# ----------------------------------------------------------------------------- fallback

def _fast_path_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, RuntimeWarning) and "fast paths" in str(w.message)]


def test_unsupported_numba_warns_once_and_uses_numbas_own_caching(tmp_path, monkeypatch):
    monkeypatch.setattr(STATE, "patches", {})
    monkeypatch.setattr(numba_patches, "installed_version", lambda: FAKE_VERSION)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not numba_patches.fast_paths_enabled()
        assert not numba_patches.fast_paths_enabled()
        assert not native.enabled()
        module, _ = DiskCache(tmp_path).load_module(_source(uuid.uuid4().hex))
        try:
            x = np.linspace(-2.0, 2.0, 7)
            np.testing.assert_allclose(module.kern(x), np.tanh(x) * 2.0 + 1.0)
            [cres] = module.kern.overloads.values()
            assert numba_patches.dispatcher_cache(module.kern) is None
            assert numba_patches.object_code(cres) is None
            assert not numba_patches.install_enable_caching_hook(lambda disp: None)
            assert not numba_patches.is_guarded(module.kern._cache)   # Numba's, untouched
        finally:
            _forget(module)
    [message] = _fast_path_warnings(caught)
    low, high = numba_patches.SUPPORTED
    assert FAKE_VERSION in message and f">={low},<{high}" in message
    assert "documented caching" in message
    assert not list(tmp_path.rglob("*.sha256"))       # no checksums: Numba's own files only


CHILD = textwrap.dedent(f'''
    import json, sys, warnings
    import numpy as np
    from jitgraph.compiler import numba_patches
    from jitgraph.compiler.state import STATE
    numba_patches.installed_version = lambda: {FAKE_VERSION!r}
    STATE.patches.pop("fast_paths", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import jitgraph
        import jitgraph.numpy as jnp
        f = jitgraph.jit(lambda a, b: jnp.tanh(a) * b + 1.0)
        a = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
        b = np.arange(4.0)
        out = f(a, b)
        program = f.lower(a, b).program
    print(json.dumps({{
        "right": bool(np.allclose(out, np.tanh(a) * b + 1.0)),
        "compiles": program.numba_compiles(), "native": bool(program.native),
        "disk_hits": jitgraph.cache_info()["disk_hits"],
        "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
                     and "fast paths" in str(w.message)]}}))
''')


def test_unsupported_numba_still_loads_from_the_disk_cache_in_a_new_process(tmp_path):
    cache_dir = tmp_path / "cache"
    env = {**os.environ, "JITGRAPH_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = runs
    for run in runs:
        assert run["right"] and not run["native"], run
        assert len(run["warnings"]) == 1 and FAKE_VERSION in run["warnings"][0], run
    assert first["compiles"] > 0
    assert second["compiles"] == 0 and second["disk_hits"] >= 1, second
    assert not list(cache_dir.rglob("*.native")) and not list(cache_dir.rglob("*.sha256"))
