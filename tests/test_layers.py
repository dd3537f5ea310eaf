"""The import contracts in ``.importlinter`` hold: layers only import downward, and no module
imports another's private names (``.ci/import_contracts.py``)."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    pytest.importorskip("importlinter")
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) \
        or shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter's lint-imports is not on PATH")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / ".ci"), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    run = subprocess.run([lint, "--no-cache", "--no-logo"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_private_names_contract_sees_reads_through_module_objects():
    """``mod._x`` through a name an import bound to a module counts as using ``_x`` (also
    through ``pkg.mod``); a name the module also binds otherwise is not taken for the module."""
    pytest.importorskip("importlinter")
    import ast
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        from import_contracts import _private_reads
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    source = (
        "import jitgraph\n"
        "from .. import numpy as jnp\n"
        "from . import functional as F\n"
        "def f(x):\n"
        "    a = jnp._promote(x)\n"              # line 5: read off jitgraph.numpy
        "    b = jitgraph.numpy._operand(x)\n"   # line 6: through the package
        "    c = jnp.where(x, a, b)._cache\n"    # an array's attribute: not a module's
        "    return F._pair(c)\n")               # F is rebound below: not taken for a module
    source += "F = None\n"
    modules = {"jitgraph", "jitgraph.numpy", "jitgraph.nn", "jitgraph.nn.functional"}
    reads = sorted(_private_reads(ast.parse(source), "jitgraph.nn", ["jitgraph"], modules))
    assert reads == [(5, "jitgraph.numpy._promote"), (6, "jitgraph.numpy._operand")]
