"""Shared pytest setup.

The jit disk cache (``JITGRAPH_CACHE_DIR``) points at a fresh temporary directory for the whole
session, so the tests never read or write the user's cache and every run starts cold (which is
what the compile-count assertions expect). Set ``JITGRAPH_TEST_CACHE_DIR`` to reuse a directory
between runs instead (faster reruns while developing; the counts that assume a cold cache are
then only checked where a test makes its own directory).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:          # ``from cases import CASES`` works however pytest is started
    sys.path.insert(0, _TESTS)

_SESSION_CACHE: dict = {}


def pytest_configure(config):
    # Set before any test module is imported, so nothing compiles into another directory.
    _SESSION_CACHE["old"] = os.environ.get("JITGRAPH_CACHE_DIR")
    keep = os.environ.get("JITGRAPH_TEST_CACHE_DIR")
    if keep:
        os.makedirs(keep, mode=0o700, exist_ok=True)
        path, _SESSION_CACHE["owned"] = keep, False
    else:
        path, _SESSION_CACHE["owned"] = tempfile.mkdtemp(prefix="jitgraph-test-cache-"), True
    os.environ["JITGRAPH_CACHE_DIR"] = path
    _SESSION_CACHE["path"] = path
    # one cache of the kernels' helpers for every process of the session, whatever cache
    # directory a test gives its subprocesses (each would compile the same helpers again);
    # the tests of where helpers go (and the stress tier) take it out of their environment
    _SESSION_CACHE["old_helpers"] = os.environ.get("JITGRAPH_HELPER_CACHE_DIR")
    os.environ["JITGRAPH_HELPER_CACHE_DIR"] = os.path.join(path, "shared-helpers")


def pytest_unconfigure(config):
    path = _SESSION_CACHE.pop("path", None)
    old = _SESSION_CACHE.pop("old", None)
    if old is None:
        os.environ.pop("JITGRAPH_CACHE_DIR", None)
    else:
        os.environ["JITGRAPH_CACHE_DIR"] = old
    old_helpers = _SESSION_CACHE.pop("old_helpers", None)
    if old_helpers is None:
        os.environ.pop("JITGRAPH_HELPER_CACHE_DIR", None)
    else:
        os.environ["JITGRAPH_HELPER_CACHE_DIR"] = old_helpers
    if path and _SESSION_CACHE.pop("owned", False):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def jit_cache_dir() -> str:
    """The session's jit disk-cache directory (also in ``os.environ['JITGRAPH_CACHE_DIR']``)."""
    return _SESSION_CACHE["path"]


_STRESS = os.path.join(_TESTS, "stress")


def pytest_ignore_collect(collection_path, config):
    """Leave the stress tier (``tests/stress``: minutes of subprocesses) out of the default run;
    it runs when named: ``python -m pytest tests/stress`` (or a file or test in it)."""
    if str(collection_path) != _STRESS:
        return None
    for arg in config.args:
        target = os.path.abspath(os.path.join(str(config.invocation_params.dir), arg.split("::")[0]))
        if target == _STRESS or target.startswith(_STRESS + os.sep):
            return None
    return True


@pytest.fixture(autouse=True)
def no_loop_ir_failures():
    """A loop kernel that ``compiler/loop_ir.py`` took but failed on (a translator bug, IR LLVM
    rejects) falls back to Numba quietly for users; in the tests it fails the test that met it."""
    from jitgraph.compiler.state import STATE
    before = STATE.compile_stats["loop_ir_failures"]
    yield
    failed = STATE.compile_stats["loop_ir_failures"] - before
    if failed:
        pytest.fail(f"{failed} loop kernel(s) failed in loop_ir (JITGRAPH_LOG=compiles says which)")
