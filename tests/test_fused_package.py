"""A fused op is one module in ``jitgraph/fused/`` plus its kernels: the package imports every
module in its folder, each registers the records it defines and is published as
``jitgraph.<name>``, and nothing outside the module names it (not the package's
``__init__``, not ``jitgraph/__init__.py``, not ``.importlinter``). The last test adds a toy
fused op to a copy of the package as one new file and finds it registered and rewriting."""
from __future__ import annotations

import ast
import os
import pathlib
import pkgutil
import shutil
import subprocess
import sys
import textwrap

import jitgraph
import jitgraph.fused
from jitgraph.rewrite import FUSED_OPS, FusedOp

ROOT = pathlib.Path(__file__).resolve().parents[1]
FUSED_DIR = ROOT / "jitgraph" / "fused"
NAMES = sorted(m.name for m in pkgutil.iter_modules([str(FUSED_DIR)]))


def test_the_package_imports_every_module_in_its_folder():
    assert NAMES == ["attention", "linear_ce"]
    assert jitgraph.fused.MODULES == NAMES


def test_each_module_registers_exactly_the_records_it_defines():
    registered = {id(r) for r in FUSED_OPS.values()}
    found = set()
    for name in NAMES:
        module = sys.modules[f"jitgraph.fused.{name}"]
        records = [v for v in vars(module).values() if isinstance(v, FusedOp)]
        assert records, f"jitgraph/fused/{name}.py defines no FusedOp record"
        assert all(id(r) in registered for r in records), name
        assert {r.name for r in records} == {name}     # the record is named as its module
        found |= {id(r) for r in records}
    assert found == registered


def test_each_module_is_published_under_its_old_name():
    import jitgraph.attention
    from jitgraph.linear_ce import linear_ce_p
    for name in NAMES:
        module = sys.modules[f"jitgraph.fused.{name}"]
        assert getattr(jitgraph, name) is module and sys.modules[f"jitgraph.{name}"] is module
    assert jitgraph.attention.ATTENTION is FUSED_OPS["attention"]
    assert linear_ce_p in FUSED_OPS["linear_ce"].primitives


def _mentions(path: pathlib.Path, name: str) -> bool:
    """Whether ``path`` names ``name`` in code (identifiers, strings, import targets), docstrings
    and comments aside."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name:
            return True
        if isinstance(node, ast.Attribute) and node.attr == name:
            return True
        if isinstance(node, ast.alias) and name in node.name.split("."):
            return True
        if isinstance(node, ast.ImportFrom) and name in (node.module or "").split("."):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs and name in node.value:
            return True
    return False


def test_no_module_is_named_outside_itself():
    lint = [line.split("#")[0] for line in (ROOT / ".importlinter").read_text().splitlines()]
    for name in NAMES:
        assert not _mentions(FUSED_DIR / "__init__.py", name)
        assert not _mentions(ROOT / "jitgraph" / "__init__.py", name)
        assert not any(name in line for line in lint), name
        for other in NAMES:
            if other != name:
                assert not _mentions(FUSED_DIR / f"{other}.py", name), (other, name)


TOY = '''
"""log(exp(x)) is x: a toy fused op, for the test that adding one is adding its module."""
from ..core import PRIMITIVES, Node
from ..rewrite import FusedOp, Rule, match, op, register_fused_op, var

_exp, _log, _reshape = PRIMITIVES["exp"], PRIMITIVES["log"], PRIMITIVES["reshape"]
_LOG_EXP = op(_log, op(_exp, var("x"), uses=1))


def _replace(builder, node, hit):
    builder.add(Node(_reshape, [hit["x"]], dict(shape=node.out.aval.shape), [node.out]))


LOG_EXP = register_fused_op(FusedOp("log_exp", primitives=(), rules=(Rule(
    roots=(_log,), match=lambda index, node: match(_LOG_EXP, index, node.out),
    replace=_replace),)))
'''

PROBE = '''
import numpy as np
import jitgraph, jitgraph.numpy as jnp
from jitgraph.rewrite import FUSED_OPS, rewritten
assert jitgraph.fused.__file__.startswith(%r), jitgraph.fused.__file__
assert sorted(FUSED_OPS) == ["attention", "linear_ce", "log_exp"], sorted(FUSED_OPS)
assert jitgraph.log_exp.LOG_EXP is FUSED_OPS["log_exp"]
graph = jitgraph.make_graph(lambda x: jnp.log(jnp.exp(x)) * 2.0)(np.arange(4.0))
names = [n.prim.name for n in rewritten(graph).nodes]
assert "exp" not in names and "log" not in names, names
with jitgraph.log_exp.LOG_EXP.disabled():
    assert "exp" in [n.prim.name for n in rewritten(graph).nodes]
print("ok", names)
'''


def test_a_new_fused_op_is_one_new_file(tmp_path):
    """A copy of the package with ``jitgraph/fused/log_exp.py`` added: imported in a fresh
    process, the record is registered, published and applied, and nothing else changed."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "jitgraph", tmp_path / "jitgraph", ignore=skip)
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels", ignore=skip)
    (tmp_path / "jitgraph" / "fused" / "log_exp.py").write_text(TOY)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE % str(tmp_path))],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok")
